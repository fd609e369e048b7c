"""``perfkit plan`` as a newcomer tries it: --help, a named GPU, a config file, bad input."""

import json

import pytest

from perfkit.cli import main
from perfkit.plan import parse_tokens

SMALL = ["--layers", "8", "--hidden", "1024", "--heads", "16", "--seq", "1024"]


def test_help_names_the_model_cluster_and_constraints(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--config", "--gpu", "--machine", "--global-batch-tokens", "--tp", "--zero", "--json"):
        assert flag in out


def test_a_named_gpu_prints_the_best_layouts_and_why_the_others_lose(capsys):
    assert main(["plan", "--gpu", "a100-80gb", "--gpus", "8", *SMALL,
                 "--global-batch-tokens", "256k", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "A100 SXM4 80GB" in out and "why the next ones lose" in out
    assert out.count("\n 1 ") == 1 and "\n 3 " in out and "\n 4 " not in out


def test_json_and_a_transformers_config(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_act": "silu", "hidden_size": 1024,
                               "intermediate_size": 2816, "num_hidden_layers": 8,
                               "num_attention_heads": 16, "num_key_value_heads": 4,
                               "vocab_size": 32000, "max_position_embeddings": 1024}))
    assert main(["plan", "--config", str(cfg), "--gpus", "16", "--json", "--tp", "2"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["model"]["kv"] == 4 and rec["model"]["seq"] == 1024
    assert rec["best"] and all(b["layout"]["tp"] == 2 for b in rec["best"])
    assert rec["best"][0]["step_s"] == pytest.approx(sum(rec["best"][0]["terms_s"].values()))
    # a slower attention kernel: named in the record, and the same best layout takes longer
    assert main(["plan", "--config", str(cfg), "--gpus", "16", "--json", "--tp", "2",
                 "--attention-efficiency", "0.1"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert rec["cluster"]["attention_efficiency"] is None
    assert slow["cluster"]["attention_efficiency"] == 0.1
    assert min(b["step_s"] for b in slow["best"]) > rec["best"][0]["step_s"]
    # a slower backward alone lengthens the step too, and is named apart
    assert main(["plan", "--config", str(cfg), "--gpus", "16", "--json", "--tp", "2",
                 "--attention-backward-efficiency", "0.05"]) == 0
    back = json.loads(capsys.readouterr().out)
    assert back["cluster"]["attention_backward_efficiency"] == 0.05
    assert back["cluster"]["attention_efficiency"] is None
    assert min(b["step_s"] for b in back["best"]) > rec["best"][0]["step_s"]
    assert rec["cluster"]["sharded_hidden"] is None  # the framework's overlap decides
    assert rec["cluster"]["dp_overlap"] == "pytorch" and "Zhao et al." in rec["cluster"]["overlap"]
    # memory-bound kernels at 0.9 of the HBM datasheet by default; slower ones lengthen the step
    assert rec["cluster"]["memory_efficiency"] == 0.9
    assert main(["plan", "--config", str(cfg), "--gpus", "16", "--json", "--tp", "2",
                 "--memory-efficiency", "0.3"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert mem["cluster"]["memory_efficiency"] == 0.3
    assert min(b["step_s"] for b in mem["best"]) > rec["best"][0]["step_s"]
    # ZeRO-3 fixed: hiding its collectives can only shorten the step
    z3 = ["plan", "--config", str(cfg), "--gpus", "16", "--json", "--zero", "3", "--tp", "1", "--pp", "1"]
    assert main(z3) == 0
    paid = json.loads(capsys.readouterr().out)
    assert main([*z3, "--sharded-hidden", "1"]) == 0
    hid = json.loads(capsys.readouterr().out)
    assert hid["cluster"]["sharded_hidden"] == 1.0
    assert hid["best"][0]["step_s"] < paid["best"][0]["step_s"]


@pytest.mark.parametrize("args, says", [
    (["--dp", "3", "--tp", "2", "--pp", "1"], "multiply to 6, which is not the GPU count 8"),
    (["--tp", "3"], "does not divide the GPU count 8"),
    (["--heads", "12", "--hidden", "1020", "--tp", "8"], "heads (12) are not divisible by --tp (8)"),
    (["--pp", "8", "--global-batch-tokens", "4k"], "too small for the pipeline"),
    (["--global-batch-tokens", "lots"], "--global-batch-tokens"),
    (["--attention-efficiency", "0"], "attention_efficiency"),
    (["--attention-backward-efficiency", "2"], "attention_backward_efficiency"),
    (["--sharded-hidden", "1.5"], "--sharded-hidden"),
    (["--memory-efficiency", "0"], "memory_efficiency"),
])
def test_bad_input_exits_2_with_the_reason(args, says, capsys):
    argv = ["plan", "--gpus", "8", *SMALL]
    for i in range(0, len(args), 2):  # the case's flags replace the defaults
        if args[i] in argv:
            argv[argv.index(args[i]) + 1] = args[i + 1]
        else:
            argv += args[i:i + 2]
    assert main(argv) == 2
    assert says in capsys.readouterr().err


def test_early_stop_pins_full_recomputation(capsys):
    base = ["plan", "--gpus", "8", *SMALL, "--json"]
    assert main([*base, "--early-stop"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["best"] and all(b["layout"]["early_stop"] and b["layout"]["recompute"] == "full"
                               for b in rec["best"])
    assert main([*base, "--early-stop", "--recompute", "none"]) == 2
    assert "--early-stop is a kind of full recomputation" in capsys.readouterr().err


def test_a_model_must_be_named(capsys):
    assert main(["plan", "--gpus", "8"]) == 2
    assert "--config config.json" in capsys.readouterr().err


def test_nothing_fits_says_why(capsys):
    # 70B parameters on 8 A100 40GB: 16 bytes per parameter do not fit 8 x 36 GB
    assert main(["plan", "--gpu", "a100-40gb", "--gpus", "8", "--layers", "80", "--hidden", "8192",
                 "--heads", "64", "--seq", "2048"]) == 1
    assert "no layout fits" in capsys.readouterr().out


def test_token_counts():
    assert parse_tokens("4M") == 4 * 2**20 and parse_tokens("512k") == 512 * 1024
    assert parse_tokens("1000") == 1000
    for bad in ("0", "x", "-3k"):
        with pytest.raises(ValueError, match="global-batch-tokens"):
            parse_tokens(bad)


def test_the_widget_draws_every_extreme_and_the_figures_refuse_bad_input():
    import matplotlib.pyplot as plt

    from perfkit.plan import compare, megatron_runs
    from perfkit.viz.plan import plan_view, plan_widget, plot_plan, plot_published

    spec = plan_widget()
    assert set(spec.controls) == {"size", "gpus", "network_gbps", "batch_mtokens"}
    # each extreme once: extremes() repeats the default setting for every control
    for kw in {tuple(sorted(kw.items())): kw for kw in spec.extremes()}.values():
        fig = spec.fn(**kw)
        assert fig.axes, kw
        plt.close(fig)
    cmp = compare(megatron_runs())
    fig = plot_published(cmp)
    # errors on a linear axis, not predicted against reported on log axes (which hid tens of %)
    left = sorted(y for c in fig.axes[0].collections for _, y in c.get_offsets())
    assert left == pytest.approx(sorted(100 * r.error for r in cmp.rows))
    assert fig.axes[0].get_yscale() == "linear" and fig.axes[1].get_xscale() == "log"
    plt.close(fig)
    with pytest.raises(ValueError, match="size"):
        plan_view(size="3B")
    with pytest.raises(TypeError, match="Plan"):
        plot_plan("plan")
    with pytest.raises(TypeError, match="Comparison"):
        plot_published([])


def test_machine_local_plans_the_tiny_gpt2_on_two_processes(monkeypatch, capsys):
    from perfkit import hw
    from perfkit.comm.alpha_beta import AlphaBeta
    from perfkit.hw import MachineLimits
    from perfkit.plan import local

    # the measured ceilings and link, stood in for (measuring them is notebook 00's and 02's job)
    limits = MachineLimits("cpu", "test", {"float32": 2e11}, 3e10)
    monkeypatch.setattr(hw, "cached_limits", lambda *a, **k: limits)
    monkeypatch.setattr(local, "local_link", lambda *a, **k: AlphaBeta(1e-4, 2e9))
    assert main(["plan", "--machine", "local", "--json", "--efficiency", "0.1"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["model"]["name"] == "tiny GPT-2" and rec["gpus"] == 2
    assert rec["global_batch"] == 16 and rec["cluster"]["efficiency"] == 0.1


def test_overlap_follows_the_framework_named_and_says_so(capsys):
    z3 = ["plan", "--gpu", "a100-80gb", "--gpus", "16", *SMALL, "--zero", "3", "--tp", "1", "--pp", "1"]
    assert main(z3) == 0
    out = capsys.readouterr().out
    assert "overlap: pytorch:" in out and "Zhao et al." in out  # the default, with its source
    got = {}
    for name in ("pytorch", "composer", "none"):
        assert main([*z3, "--json", "--overlap", name]) == 0
        rec = json.loads(capsys.readouterr().out)
        assert rec["cluster"]["dp_overlap"] == name and name in rec["cluster"]["overlap"]
        got[name] = rec["best"][0]["terms_s"]["ZeRO-3 collectives"]
    # prefetching hides the most, Composer's BACKWARD_POST less, no overlap nothing
    assert 0 < got["pytorch"] <= got["composer"] < got["none"]
    with pytest.raises(SystemExit) as e:
        main([*z3, "--overlap", "fsdp"])
    assert e.value.code == 2 and "--overlap" in capsys.readouterr().err


def test_framework_flag_searches_only_what_it_offered_and_says_so(capsys):
    """--framework megatron-lm-2021: no ZeRO, SP or CP, stages dividing the 10 layers, its 20
    bytes per parameter. Planted: a flag parsed but not passed to the search would print
    layouts the default search prints (ZeRO, SP or a pipeline of 4 over 10 layers)."""
    args = ["plan", "--gpu", "a100-80gb", "--gpus", "32", "--layers", "10", "--hidden", "2048",
            "--heads", "16", "--seq", "2048", "--global-batch-tokens", "1M", "--top", "40", "--json"]
    assert main(args) == 0
    anyone = [b["layout"] for b in json.loads(capsys.readouterr().out)["best"]]
    outside = [lay for lay in anyone if lay["zero"] or lay["sp"] or lay["cp"] > 1 or 10 % lay["pp"]]
    assert outside, "the default search must offer what the framework lacks, or this proves nothing"
    assert main([*args, "--framework", "megatron-lm-2021"]) == 0
    rec = json.loads(capsys.readouterr().out)
    inside = [b["layout"] for b in rec["best"]]
    assert inside and all(lay["zero"] == 0 and not lay["sp"] and lay["cp"] == 1
                          and 10 % lay["pp"] == 0 for lay in inside), inside
    assert main(args[:-1] + ["--framework", "megatron-lm-2021"]) == 0
    out = capsys.readouterr().out
    assert "framework: Megatron-LM (April 2021)" in out and "gradients 6 + optimizer 12" in out
    assert main(args[:-1]) == 0
    assert "framework: any option the planner knows (default; set --framework)" in \
        capsys.readouterr().out


@pytest.mark.parametrize("extra, words", [
    (["--precision", "bf16"], "--precision bf16 with --framework megatron-lm-2021"),
    (["--zero", "1"], "no ZeRO stage 1"),
    (["--pp", "4"], "stages to divide"),
])
def test_framework_flag_refuses_what_the_framework_did_not_have(extra, words, capsys):
    assert main(["plan", "--gpu", "a100-80gb", "--gpus", "32", "--layers", "10", "--hidden",
                 "2048", "--heads", "16", "--seq", "2048", "--framework", "megatron-lm-2021",
                 *extra]) == 2
    assert words in capsys.readouterr().err


def test_framework_flag_rejects_an_unknown_name(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", *SMALL, "--framework", "megatron"])
    assert e.value.code == 2 and "megatron-lm-2021" in capsys.readouterr().err


def test_the_plan_legend_names_only_the_terms_its_bars_show():
    """A term whose bar no reader can see (the optimizer's milliseconds beside seconds of
    matmul) is not given a colour in the legend; the legend's title names it instead."""
    import matplotlib.pyplot as plt

    from perfkit.plan import ModelSpec, named_cluster, plan
    from perfkit.viz.plan import VISIBLE_SHARE, plot_plan

    model = ModelSpec("Llama-style 8B", layers=32, hidden=4096, heads=32, ffn=14336, vocab=128256,
                      seq=8192, kv_heads=8, gated=True, tied=False)
    p = plan(model, named_cluster("h100-sxm"), 64, 512)
    best = p.best[:5]
    longest = max(c.time.total_s for c in best)
    tiny = {t for t in best[0].time.terms if 0 < max(c.time.terms[t] for c in best) < VISIBLE_SHARE * longest}
    assert "optimizer" in tiny  # the case this test is about
    fig = plot_plan(p)
    legend = fig.axes[0].get_legend()
    shown = {t.get_text() for t in legend.get_texts()}
    assert not shown & tiny and "matmul" in shown
    assert all(t in legend.get_title().get_text() for t in tiny)
    plt.close(fig)


def test_plot_plan_gives_each_colour_one_meaning():
    """The step-time panel and the memory panel share no colour: orange is not a term on the
    left and a kind of memory on the right."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from perfkit.plan import ModelSpec, named_cluster, plan
    from perfkit.viz.plan import plot_plan

    model = ModelSpec("Llama-style 8B", layers=32, hidden=4096, heads=32, ffn=14336, vocab=128256,
                      seq=8192, kv_heads=8, gated=True, tied=False)
    fig = plot_plan(plan(model, named_cluster("h100-sxm"), 64, 512))
    colours = [{to_hex(p.get_facecolor()) for p in ax.patches} for ax in fig.axes[:2]]
    assert colours[0] and colours[1] and not colours[0] & colours[1]
    plt.close(fig)
