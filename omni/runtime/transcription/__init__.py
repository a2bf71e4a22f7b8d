"""A transcription model's (Whisper's) runtime: its process (worker), what crosses its pipe
(wire), the server's handle on it (engine), its windows, audio decoding and the default model."""
