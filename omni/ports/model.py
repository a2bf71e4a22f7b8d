"""What the model pool holds, whatever the modality: one Model protocol that every runtime
implements, so the pool reads what it needs (is it in use, did it load, what does it take)
and never probes. And Answer: a reply that comes in pieces from a one-request-at-a-time model."""

from __future__ import annotations

from typing import Protocol, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Model(Protocol):
    """A loaded model, of any kind (omni.service.models keeps them within a budget)."""

    model_id: str

    @property
    def running(self) -> int:
        """Jobs or requests it works on, or that wait for it (a model with any is never
        evicted)."""
        ...

    @property
    def queued(self) -> int:
        """Jobs submitted but not yet taken (0 where `running` counts them)."""
        ...

    @property
    def loading(self) -> bool:
        """Handed over while its weights still load (jobs submitted meanwhile wait)."""
        ...

    @property
    def load_error(self) -> str | None:
        """Why its weights could not be loaded, once that is known."""
        ...

    @property
    def memory_bytes(self) -> int | None:
        """What its weights take in memory (float32 unpacking, quantization), where it knows:
        what the pool counts against its budget in place of the size on disk. None: not
        known (or not loaded yet)."""
        ...

    @property
    def path(self) -> str:
        """The folder or file it was loaded from (a default: where it was fetched to), which
        the pool measures where it reports no memory; "": nothing to measure."""
        ...

    def close(self) -> None: ...


class Answer(Protocol[T_co]):
    """A model's answer as it comes, from a process that does one request at a time: an
    async iterator whose cancel() asks the model to stop at its next piece (what it sent
    already still comes, then its last value, which says it was cancelled)."""

    def __aiter__(self) -> Answer[T_co]: ...

    async def __anext__(self) -> T_co: ...

    def cancel(self) -> None: ...

    async def aclose(self) -> None:
        """Stop reading (cancelling the request if it is not over)."""
        ...
