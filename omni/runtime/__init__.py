"""The MLX runtime: the engine process, continuous batching, generation, model loading and
GGUF conversion. The only package that imports MLX; it knows nothing of HTTP or the database."""
