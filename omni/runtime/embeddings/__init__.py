"""An embedding model's runtime: its process (worker), what crosses its pipe (wire), the
server's handle on it (engine), pooling, and the default model fetched once."""
