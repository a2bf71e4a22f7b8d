"""A text-to-speech model's runtime: its process (worker), what crosses its pipe (wire), the
server's handle on it (engine) and the audio encoder its process writes with."""
