"""The MLX runtime, the only package that imports MLX; it knows nothing of HTTP or the
database. A modality's runtime is a folder with the same files for the same roles: `worker`
(the model's process), `wire` (what crosses its pipe) and `engine` (the server's handle):
chat/ (and vision/, which speaks its pipe), embeddings/, speech/, transcription/ and images/,
whose handles share one base (model_process), as every worker shares one start
(model_worker). loading/ finds, fetches and converts models; platform/ is what the machine
gives them (the BLAS, CPU kernels)."""
