"""ONNX Runtime's session settings for the encoder (`SessionSettings`): the options every encoder session is created
with, how many cores it uses, and why these defaults.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Literal


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@dataclass(frozen=True)
class SessionSettings:
    """ONNX Runtime session options (the runs that chose them: docs/benchmarks.md, from
    bench/results/ort_options.json). The graph levels differ by less than the run-to-run
    noise, so "extended" stays: every fusion ORT has for this graph, none of the layout passes. Sequential
    execution and the CPU arena are never worse. Intra-op spinning gains nothing steady on an idle machine, costs
    throughput when the cores are oversubscribed, and does nothing for the service's 1-thread sessions: it is off.

    `threads` cores are used by parallel *runs* by default: the session has one intra-op thread and up to
    `threads` runs (row slices or whole batches) execute at once from a small thread pool. Concurrent 1-thread
    runs encode a corpus faster than one run over several intra-op threads, and a single query is faster on one
    thread, since two threads synchronise after each of the graph's small operators."""

    threads: int | None = None  # cores to use (None: every core this process may use)
    parallel_runs: bool = True  # spread `threads` over concurrent 1-thread runs, not over one run's operators
    graph_optimization: Literal["basic", "extended", "all"] = "extended"
    execution_mode: Literal["sequential", "parallel"] = "sequential"
    cpu_arena: bool = True
    spinning: bool = False

    def replace(self, **changes: object) -> SessionSettings:
        return replace(self, **changes)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def to_ort(self):  # noqa: ANN201 - onnxruntime.SessionOptions, imported lazily
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1 if self.parallel_runs else self.threads or default_threads()
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = {
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.graph_optimization]
        opts.execution_mode = (ort.ExecutionMode.ORT_PARALLEL if self.execution_mode == "parallel"
                               else ort.ExecutionMode.ORT_SEQUENTIAL)
        opts.enable_cpu_mem_arena = self.cpu_arena
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spinning else "0")
        return opts
