"""Objectives, SG-OPT and the trainer on a tiny random BERT: real losses, real checkpoints, real resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

from models.objectives import SupHardNegSimCSE, UnsupSimCSE, build_objective
from models.poolers import load_pooler
from models.sentence_model import SentenceModel
from models.train_config import TrainConfig, make_config
from models.trainer import Trainer
from tests.models.fixtures import SENTENCES, tiny_sts


def config(tiny_bert, out, **kw) -> TrainConfig:
    values = dict(
        model=str(tiny_bert),
        out=out,
        batch_size=4,
        max_length=16,
        eval_every=2,
        max_steps=4,
        progress=False,
        device="cpu",
        lr=1e-3,
    )
    values.update(kw)
    return TrainConfig(**values)


def examples(columns: int):
    return [tuple(SENTENCES[(i + j) % len(SENTENCES)] for j in range(columns)) for i in range(len(SENTENCES))]


def test_hard_negative_identical_to_positive_costs_at_least_log2(tiny_bert):
    model = SentenceModel.from_checkpoint(tiny_bert, pooler="avg_last").eval()
    batch = [(a, b, b) for a, b, _ in examples(3)[:4]]  # the hard negative *is* the positive
    loss = SupHardNegSimCSE(0.05).loss(model, batch)
    assert loss.item() >= math.log(2) - 1e-4
    honest = SupHardNegSimCSE(0.05).loss(model, examples(3)[:4])
    assert honest.item() != pytest.approx(loss.item())


def test_unsup_dropout_views_give_gradients_to_encoder_and_pooler(tiny_bert):
    model = SentenceModel.from_checkpoint(tiny_bert, pooler="layer_att").train()
    loss = UnsupSimCSE(0.05).loss(model, examples(1)[:6])
    loss.backward()
    assert loss.item() > 0
    assert model.encoder.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert model.pooler.w_q.weight.grad.abs().sum() > 0
    model.eval()  # no dropout: the two views coincide, so the positive is the best-scoring candidate
    with torch.no_grad():
        z = model(SENTENCES[:6] * 2)
    assert torch.allclose(z[:6], z[6:], atol=1e-5)


def test_sgopt_freezes_copy_and_layer0_and_keeps_only_tuned_copy(tiny_bert, tmp_path):
    cfg = config(tiny_bert, tmp_path / "sg", pooler="sgopt_head", objective="sgopt", sgopt_lambda=0.1)
    trainer = Trainer(cfg, examples=examples(1), dev=tiny_sts())
    frozen_before = {k: v.clone() for k, v in trainer.objective.frozen.state_dict().items()}
    emb_before = trainer.model.encoder.embeddings.word_embeddings.weight.clone()
    layer_before = trainer.model.encoder.encoder.layer[0].output.dense.weight.clone()
    trainer.train()
    for k, v in trainer.objective.frozen.state_dict().items():
        assert torch.equal(v, frozen_before[k]), f"frozen copy changed at {k}"
    assert torch.equal(trainer.model.encoder.embeddings.word_embeddings.weight, emb_before)
    assert not torch.equal(trainer.model.encoder.encoder.layer[0].output.dense.weight, layer_before)
    best = tmp_path / "sg" / "best"
    assert sorted(p.name for p in best.iterdir()) == ["encoder", "pooler", "train.json"]
    assert load_pooler(best / "pooler").kind == "sgopt_head"


def test_sgopt_loss_is_zero_regulariser_at_start(tiny_bert):
    objective = build_objective("sgopt", 0.05, reg_lambda=1000.0)
    model = SentenceModel.from_checkpoint(tiny_bert, pooler="sgopt_head")
    objective.setup(model)
    big_lambda = objective.loss(model, examples(1)[:4]).item()
    objective.reg_lambda = 0.0
    assert objective.loss(model, examples(1)[:4]).item() == pytest.approx(big_lambda, rel=1e-4)
    with torch.no_grad():
        model.encoder.encoder.layer[1].output.dense.weight.add_(0.01)
    objective.reg_lambda = 1000.0
    assert objective.loss(model, examples(1)[:4]).item() > big_lambda + 1.0


def test_trainer_logs_keeps_best_and_resumes(tiny_bert, tmp_path):
    out = tmp_path / "run"
    first = Trainer(
        config(tiny_bert, out, pooler="layer_att", objective="sup_hardneg"), examples=examples(3), dev=tiny_sts()
    )
    result = first.train()
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "stsb_dev" in r] == [0, 2, 4]
    assert any("loss" in r for r in records) and records[-1]["event"] == "end"
    assert result.steps == 4 and (out / "best" / "encoder" / "config.json").is_file()
    assert (out / "last" / "trainer_state.pt").is_file()
    best_step = json.loads((out / "best" / "train.json").read_text())["step"]
    assert best_step == result.best_step
    resumed = Trainer(
        config(tiny_bert, out, pooler="layer_att", objective="sup_hardneg", max_steps=6, resume=True),
        examples=examples(3),
        dev=tiny_sts(),
    )
    resumed.try_resume()
    assert resumed.step == 4
    # the weights, optimizer and scheduler are the ones the first run ended with (saved at step 4), not the
    # checkpoint's it started from
    start = Trainer(config(tiny_bert, tmp_path / "fresh", pooler="layer_att", objective="sup_hardneg"),
                    examples=examples(3), dev=tiny_sts())
    trained, restored, fresh = (t.model.state_dict() for t in (first, resumed, start))
    assert trained.keys() == restored.keys()
    for name, value in trained.items():
        torch.testing.assert_close(restored[name], value, rtol=0, atol=0, msg=name)
    assert any(not torch.equal(fresh[name], value) for name, value in trained.items())  # training moved them
    want, got = first.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert got["param_groups"] == want["param_groups"] and got["state"].keys() == want["state"].keys()
    assert want["state"] and all(int(want["state"][i]["step"]) == 4 for i in want["state"])
    for i, state in want["state"].items():
        for key, value in state.items():
            torch.testing.assert_close(got["state"][i][key], value, rtol=0, atol=0, msg=f"{i}.{key}")
    assert resumed.scheduler.state_dict() == first.scheduler.state_dict()
    assert (resumed.best_dev, resumed.best_step) == (first.best_dev, first.best_step)
    resumed.cfg = resumed.cfg.model_copy(update={"resume": False})
    resumed.train()
    steps = [json.loads(line).get("step") for line in (out / "log.jsonl").read_text().splitlines()]
    assert steps.count(0) == 1 and 6 in steps  # continued, did not restart


def test_same_seed_same_weights(tiny_bert, tmp_path):
    weights = []
    for name in ("a", "b"):
        trainer = Trainer(
            config(tiny_bert, tmp_path / name, max_steps=2, eval_every=100), examples=examples(1), dev=tiny_sts()
        )
        trainer.train()
        weights.append(trainer.model.encoder.encoder.layer[2].output.dense.weight.detach().clone())
    torch.testing.assert_close(weights[0], weights[1])


def test_config_file_toml_and_validation(tmp_path):
    f = tmp_path / "train.toml"
    f.write_text(
        'out = "runs/x"\npooler = "s2sent"\nobjective = "sup_hardneg"\nbatch_size = 8\n'
        "[pooler_options]\nlast_k = 3\nfreq_groups = 4\n"
    )
    cfg = make_config(f, max_steps=10, batch_size=None)
    assert cfg.pooler_options == {"last_k": 3, "freq_groups": 4} and cfg.batch_size == 8 and cfg.max_steps == 10
    assert cfg.temperature == 0.05
    f.write_text('out = "x"\nbatch_sise = 8\n')
    with pytest.raises(ValueError):
        make_config(f)


def test_encoder_train_cli_runs_a_few_steps(tiny_bert, tmp_path, capsys):
    from tests.models.fixtures import shared_data

    shared_data()  # the CLI selects on the real STS-B dev set
    from models.cli import main

    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "cli-run"
    rc = main(["train", "--model", str(tiny_bert), "--out", str(out), "--data", str(text), "--pooler", "s2sent",
               "--pooler-options", '{"last_k": 2, "freq_groups": 2, "reduction": 4}', "--max-steps", "2",
               "--batch-size", "4", "--eval-every", "2", "--eval-max-pairs", "20", "--device", "cpu"])
    assert rc == 0
    assert "best STS-B dev" in capsys.readouterr().out
    assert load_pooler(out / "best" / "pooler").options["freq_groups"] == 2
    assert main(["train", "--model", str(tiny_bert), "--out", str(out), "--pooler", "nope", "--max-steps", "1",
                 "--data", str(text)]) == 2  # a clear error line, not a traceback


@pytest.mark.parametrize("sub", ["train", "sts", "lc-search"])
def test_training_subcommands_have_help(sub, capsys):
    from models.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([sub, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: encoder {sub}" in capsys.readouterr().out


def test_a_stop_between_the_checkpoints_renames_resumes_from_the_previous_one(tiny_bert, tmp_path):
    """`save_last` moves the previous checkpoint aside before the new one takes its name: a stop between the two
    renames leaves `last.old` only, and the run resumes from it instead of starting over."""
    out = tmp_path / "run"
    Trainer(config(tiny_bert, out, pooler="layer_att", objective="sup_hardneg"), examples=examples(3),
            dev=tiny_sts()).train()
    assert not (out / "last.old").exists()  # removed once the new checkpoint is in place
    (out / "last").rename(out / "last.old")  # what a stop between the renames leaves
    resumed = Trainer(config(tiny_bert, out, pooler="layer_att", objective="sup_hardneg", max_steps=6, resume=True),
                      examples=examples(3), dev=tiny_sts())
    resumed.try_resume()
    assert resumed.step == 4


@pytest.mark.parametrize("flags, names", [
    (["--lr", "inf"], "lr"),
    (["--pooler-lr", "inf"], "pooler_lr"),
    (["--temperature", "inf"], "temperature"),
    (["--sgopt-lambda", "inf"], "sgopt_lambda"),
    (["--adam-betas", "1.5", "0.9"], "adam_betas"),
    (["--seed", "-1"], "seed"),
    (["--pooler-options", "{bad"], "--pooler-options"),
])
def test_train_refuses_bad_numbers_with_one_line_naming_the_flag(tiny_bert, tmp_path, capsys, flags, names):
    """An infinite learning rate, τ or λ trains to NaN and a beta >= 1 or a negative seed fails deep in torch or
    numpy: each is a one-line error naming the setting, before anything is written."""
    from models.cli import main

    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "run"
    rc = main(["train", "--model", str(tiny_bert), "--out", str(out), "--data", str(text), "--max-steps", "1",
               "--batch-size", "4", "--device", "cpu", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("encoder train: error:") and names in err and "Traceback" not in err
    assert not out.exists()


def test_unknown_pooler_options_are_refused_not_ignored(tiny_bert, tmp_path):
    """A misspelt option is an error naming the options the pooler takes: a pooler without options no longer
    keeps it in pooler.json and ignores it, and one with options no longer raises a raw TypeError."""
    from models.poolers import build_pooler

    with pytest.raises(ValueError, match=r"cls_last has no option 'concat_cls_lst' \(it takes none\)"):
        build_pooler("cls_last", 32, 3, concat_cls_lst=False)
    with pytest.raises(ValueError, match=r"layer_att has no option 'zz' \(it takes attention, concat_cls_last"):
        build_pooler("layer_att", 32, 3, attention="cls", zz=1)
    with pytest.raises(ValueError, match="no option"):
        Trainer(config(tiny_bert, tmp_path / "run", pooler="scalar_mix", pooler_options={"include_embedings": False}),
                examples=examples(1), dev=tiny_sts())
    assert build_pooler("scalar_mix", 32, 3, include_embeddings=False).start == 1  # a real option still works


def test_resume_with_other_settings_is_refused_naming_them(tiny_bert, tmp_path, capsys):
    """--resume with another pooler crashed in load_state_dict (a traceback); with another learning rate or seed it
    went on silently (the loaded optimiser state overrode the new rate, the batches followed another order). The
    run's length may change; its defining settings may not."""
    out = tmp_path / "run"
    Trainer(config(tiny_bert, out, max_steps=2, eval_every=100), examples=examples(1), dev=tiny_sts()).train()
    for changed, named in (({"pooler": "layer_att"}, "pooler 'cls_last' → 'layer_att'"),
                           ({"lr": 1e-4, "seed": 7}, "lr 0.001 → 0.0001; seed 42 → 7")):
        resumed = Trainer(config(tiny_bert, out, max_steps=4, resume=True, **changed), examples=examples(1),
                          dev=tiny_sts())
        with pytest.raises(ValueError, match=f"cannot resume {out / 'last'}: .*\\({named}\\)"):
            resumed.train()
    spelt_otherwise = f"{tiny_bert}/../{tiny_bert.name}"  # the same model folder, another path to it
    resumed = Trainer(config(tiny_bert, out, max_steps=4, eval_every=100, resume=True, model=spelt_otherwise),
                      examples=examples(1), dev=tiny_sts())
    assert resumed.train().steps == 4  # same settings, a longer run: resumed


def test_encoder_train_resume_with_another_pooler_is_one_line(tiny_bert, tmp_path, capsys):
    from models.cli import main

    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "run"
    Trainer(config(tiny_bert, out, max_steps=2, eval_every=100, data=str(text), batch_size=4, max_length=32),
            dev=tiny_sts()).train()
    from tests.models.fixtures import shared_data

    shared_data()  # the CLI loads the real STS-B dev set before resuming
    rc = main(["train", "--model", str(tiny_bert), "--out", str(out), "--data", str(text), "--batch-size", "4",
               "--lr", "1e-3", "--max-steps", "3", "--resume", "--pooler", "scalar_mix", "--device", "cpu",
               "--eval-max-pairs", "8"])
    err = capsys.readouterr().err
    assert rc == 2 and "encoder train: error: cannot resume" in err and "pooler 'cls_last' → 'scalar_mix'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["sts", "--max-pairs", "0"], ["sts", "--max-pairs", "-3"], ["sts", "--max-length", "0"], ["sts", "--threads", "0"],
    ["lc-search", "--max-layers", "0"], ["lc-search", "--beam", "0"], ["lc-search", "--max-pairs", "-1"],
    ["lc-search", "--max-length", "-1"],
])
def test_sts_and_lc_search_refuse_counts_below_one(argv, capsys):
    """`encoder sts --max-pairs 0` printed nan and -3 scored all pairs but the last three (a slice); `lc-search
    --max-layers 0` died in an IndexError traceback: each is a usage error naming the flag."""
    from models.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:  # refused while parsing: nothing is loaded or evaluated
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert f"argument {argv[1]}: must be >= 1" in capsys.readouterr().err


def test_a_fresh_run_never_replaces_an_earlier_runs_checkpoints(tiny_bert, tmp_path):
    """Running the same `encoder train` again without --resume replaced the earlier run's best/ with the untrained
    model at its step-0 evaluation (best_dev starts at -inf), silently. It is refused; --resume continues."""
    out = tmp_path / "run"
    Trainer(config(tiny_bert, out, max_steps=2, eval_every=100), examples=examples(1), dev=tiny_sts()).train()
    best = (out / "best" / "encoder" / "model.safetensors").read_bytes()
    again = Trainer(config(tiny_bert, out, max_steps=2, eval_every=100), examples=examples(1), dev=tiny_sts())
    with pytest.raises(ValueError, match=f"{out} already holds a training run \\(best, last\\): pass --resume"):
        again.train()
    assert (out / "best" / "encoder" / "model.safetensors").read_bytes() == best
    resumed = Trainer(config(tiny_bert, out, max_steps=3, eval_every=100, resume=True), examples=examples(1),
                      dev=tiny_sts())
    assert resumed.train().steps == 3


def test_a_training_length_past_the_position_embeddings_is_refused_up_front(tiny_bert, tmp_path, capsys):
    """--max-length 100 on a 64-position BERT trained until the first batch longer than 64 tokens, then died in
    torch with a traceback; it is a one-line error before any data is read."""
    from models.checkpoint import CheckpointError
    from models.cli import main

    with pytest.raises(CheckpointError, match="--max-length 100: .* takes 2..64 tokens"):
        Trainer(config(tiny_bert, tmp_path / "run", max_length=100), examples=examples(1), dev=tiny_sts())
    long_text = tmp_path / "long.txt"
    long_text.write_text(("the sky is blue " * 30 + "\n") * 8)
    rc = main(["train", "--model", str(tiny_bert), "--out", str(tmp_path / "cli"), "--data", str(long_text),
               "--max-length", "100", "--batch-size", "4", "--max-steps", "2", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "encoder train: error: --max-length 100:" in err and "Traceback" not in err
