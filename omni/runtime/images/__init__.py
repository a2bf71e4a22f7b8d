"""An image generation model's runtime: its process (worker), what crosses its pipe (wire)
and the server's handle on it (engine)."""
