"""Training configuration: one pydantic model, filled from a TOML/YAML file and/or command-line flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, model_validator


class TrainConfig(BaseModel):
    # infinite or NaN numbers are refused like out-of-range ones (an infinite learning rate or τ trains to NaN)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str | None = Field(None, description="HF checkpoint folder (default: all-MiniLM-L6-v2)")
    out: Path = Field(..., description="output folder: best/, last/, log.jsonl")
    pooler: str = "cls_last"
    pooler_options: dict[str, Any] = Field(default_factory=dict)
    objective: Literal["unsup", "sup", "sup_hardneg", "sgopt"] = "unsup"
    temperature: float | None = Field(None, gt=0, description="τ (default: the objective's paper value)")
    sgopt_lambda: float = Field(0.1, ge=0)
    data: str = Field("wiki", description="wiki | snli | quora | triplet file from `encoder mine` | path to a "
                      "one-sentence-per-line file")
    max_examples: int | None = Field(None, gt=0)
    batch_size: int = Field(64, gt=0)
    max_length: int = Field(32, gt=1)
    lr: float = Field(3e-5, gt=0)
    pooler_lr: float | None = Field(
        None, gt=0, description="a separate rate for pooler/head parameters (default: `lr`, one rate as in the papers)"
    )
    adam_betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] | None = Field(
        None, description="AdamW betas, each in [0, 1) (default: the objective's)")
    weight_decay: float = 0.0
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    epochs: int = Field(1, gt=0)
    max_steps: int | None = Field(None, gt=0, description="stop after this many steps (overrides epochs)")
    grad_clip: float = Field(1.0, gt=0)
    seed: int = Field(42, ge=0, lt=2**32)  # numpy's and torch's seed range
    eval_every: int = Field(125, gt=0)
    eval_at_start: bool = Field(True, description="score the untouched model at step 0 (it may stay the best)")
    eval_max_pairs: int | None = Field(None, gt=0, description="cap STS-B dev pairs (quick runs)")
    eval_on: Literal["stsb", "quora"] = Field(
        "stsb", description="selection metric: STS-B dev Spearman, or MRR@10 on the Quora dev split (rows "
        "296,000-299,999, drawn from the training range; never the evaluation or held-out rows)"
    )
    eval_mode: Literal["cls", "mean", "pooler"] = Field(
        "cls", description="what dev selects on: the detached last-layer [CLS] (served), the detached token mean, "
        "or the pooler output"
    )
    save_every: int | None = Field(None, gt=0, description="resume checkpoint every N steps (default: eval_every)")
    resume: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(True, description="bf16 autocast when on CUDA")
    threads: int | None = Field(None, gt=0)
    progress: bool = True

    @model_validator(mode="after")
    def _objective_defaults(self) -> TrainConfig:
        """τ and betas left unset take the objective's paper values, so the saved config says what ran."""
        from models.objectives import REGISTRY

        objective = REGISTRY[self.objective]
        if self.temperature is None:
            self.temperature = objective.default_temperature
        if self.adam_betas is None:
            self.adam_betas = objective.default_betas
        return self


def load_config_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".toml":
        return tomllib.loads(text)
    if path.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text) or {}
    raise ValueError(f"config must be .toml, .yaml or .yml: {path}")


def make_config(file: str | Path | None = None, **overrides: Any) -> TrainConfig:
    """File values, then non-None overrides (the flags) on top; pydantic validates the result."""
    values = load_config_file(file) if file else {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return TrainConfig.model_validate(values)
