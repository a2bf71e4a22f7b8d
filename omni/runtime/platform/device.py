"""Which device the server process itself uses: none but the CPU."""

from __future__ import annotations


def keep_server_off_the_accelerator() -> None:
    """The model runs in the engine process; the server process serves HTTP and keeps the log.
    It must not open the accelerator (mlx-lm makes a stream on the default device when it is
    imported), so that the engine has the GPU to itself. Call before anything imports mlx-lm;
    a one-time model conversion in the server process then runs on the CPU."""
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
