"""Training configuration: one pydantic model, filled from a TOML/YAML file and/or command-line flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="HF checkpoint folder (default: all-MiniLM-L6-v2)")
    out: Path = Field(..., description="output folder: best/, last/, log.jsonl")
    pooler: str = "cls_last"
    pooler_options: dict[str, Any] = Field(default_factory=dict)
    objective: Literal["unsup", "sup", "sup_hardneg", "sgopt"] = "unsup"
    temperature: float = Field(0.05, gt=0)
    sgopt_lambda: float = Field(0.1, ge=0)
    data: str = Field("wiki", description="wiki | snli | quora | path to a one-sentence-per-line file")
    max_examples: int | None = Field(None, gt=0)
    batch_size: int = Field(64, gt=0)
    max_length: int = Field(32, gt=1)
    lr: float = Field(3e-5, gt=0)
    pooler_lr: float = Field(1e-3, gt=0, description="for pooler/head parameters, which start from scratch")
    weight_decay: float = 0.0
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    epochs: int = Field(1, gt=0)
    max_steps: int | None = Field(None, gt=0, description="stop after this many steps (overrides epochs)")
    grad_clip: float = Field(1.0, gt=0)
    seed: int = 42
    eval_every: int = Field(125, gt=0)
    eval_at_start: bool = Field(True, description="score the untouched model at step 0 (it may stay the best)")
    eval_max_pairs: int | None = Field(None, gt=0, description="cap STS-B dev pairs (quick runs)")
    eval_mode: Literal["cls", "pooler"] = Field(
        "cls", description="what dev selects on: the detached last-layer [CLS] (served) or the pooler output"
    )
    save_every: int | None = Field(None, gt=0, description="resume checkpoint every N steps (default: eval_every)")
    resume: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(True, description="bf16 autocast when on CUDA")
    threads: int | None = Field(None, gt=0)
    progress: bool = True


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
