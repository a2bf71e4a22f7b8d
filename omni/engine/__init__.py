"""Generation: the only package that imports MLX. It knows nothing of HTTP or the database."""
