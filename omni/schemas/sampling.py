"""Sampling extras both APIs accept (Responses takes them as top-level fields, as peers do)."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator


class SamplingExtras(BaseModel):
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    # Most tokens a reasoning model may think before its think block is closed for it.
    thinking_budget: int | None = Field(default=None, ge=0)
    # LoRA adapters (an mlx-lm adapter folder) loaded with the model, as mlx-lm's server.
    adapter_path: str | None = Field(default=None, min_length=1)
    # A draft model (a model id) for speculative decoding, as mlx-lm's server.
    draft_model: str | None = Field(default=None, min_length=1)

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for token, bias in (value or {}).items():
            if not token.lstrip("-").isdigit() or int(token) < 0:
                raise ValueError(f"keys are token ids, got {token!r}")
            if not -100 <= bias <= 100:
                raise ValueError("biases are between -100 and 100")
        return value

    def sampling_fields(self) -> dict[str, object]:
        """The engine's Sampling fields for these extras, but top_k, min_p and
        repetition_penalty: what a request leaves of those out is the server's or the model's
        (omni.service.defaults resolves them with temperature and top_p)."""
        return {
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "logit_bias": tuple((int(k), v) for k, v in (self.logit_bias or {}).items()),
            "seed": self.seed,
            "thinking_budget": self.thinking_budget,
        }
