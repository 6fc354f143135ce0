"""The planner: layers found, measured on the mesh, degrees chosen with reasons, plans
saved and loaded, a model that fits nowhere named."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from meshrt import parallel, this_host  # noqa: E402
from meshrt.parallel import Plan, Strategy  # noqa: E402
from meshrt.parallel.auto import choose, factorizations  # noqa: E402
from meshrt.parallel.cost import Links  # noqa: E402
from meshrt.parallel.layers import cut_groups, layer_units  # noqa: E402
from meshrt.parallel.profile import LayerStats, merge_layers, profile_model  # noqa: E402
from meshrt.parallel.tied import shared_weights  # noqa: E402

from .test_parallel import (  # noqa: E402
    adamw,
    assert_same_training,
    batches,
    deep_mlp,
    mlp,
    mse,
    single_process,
)


def test_layers_of_sequential_and_block_models():
    assert [n for n, _ in layer_units(mlp())] == ["0", "1", "2", "3", "4"]

    class Blocks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
            self.head = torch.nn.Linear(4, 10)

    assert [n for n, _ in layer_units(Blocks())] == ["embed", "blocks.0", "blocks.1", "blocks.2", "head"]
    # a pipeline stage starts at a block: the embedding rides with the first, the head with the last
    assert cut_groups(Blocks()) == [[0, 1], [2], [3, 4]]
    assert cut_groups(mlp()) == [[0], [1], [2], [3], [4]]


def test_gpt2_groups_and_tied_weights_across_stages():
    pytest.importorskip("transformers")
    from .test_parallel import tiny_gpt2

    model = tiny_gpt2()
    names = [n for n, _ in layer_units(model)]
    groups = cut_groups(model)
    assert [names[k] for k in groups[0]] == ["transformer.wte", "transformer.wpe", "transformer.h.0"]
    assert [names[k] for k in groups[-1]] == ["transformer.h.3", "transformer.ln_f", "lm_head"]
    stats = [LayerStats(n, 1, 4, 4, 8, 1.0, 0.0, 1e-3, 2.0) for n in names]
    merged = merge_layers(stats, groups)
    assert [m.name for m in merged][0] == "transformer.wte+transformer.wpe+transformer.h.0"
    assert sum(m.param_bytes for m in merged) == sum(s.param_bytes for s in stats)
    # two stages: the token embedding (first) and the head (last) share one weight
    starts = [groups[0][0], groups[2][0]]
    assert shared_weights(model, starts) == [{0: "transformer.wte.weight", 1: "lm_head.weight"}]
    assert shared_weights(model, [0]) == []


def test_profile_counts_bytes_of_parameters_gradients_optimizer_and_activations():
    layers = profile_model(mlp, batches(1)[0], adamw, mse)
    first = layers[0]
    assert first.name == "0" and first.params == 8 * 32 + 32
    assert first.param_bytes == first.grad_bytes == first.params * 4
    assert first.optim_bytes == 2 * first.params * 4  # AdamW: two moments per parameter
    assert layers[1].params == 0 and layers[1].act_bytes_per_sample > 0  # tanh saves its output
    assert all(layer.time(16) > 0 for layer in layers)


def _layers(n, params=1000, act=100.0, t=1e-4):
    return [LayerStats(f"h.{i}", params, params * 4, params * 4, params * 8, act, 1e-5, t, act)
            for i in range(n)]


def test_choice_prefers_data_parallel_when_everything_fits_and_shards_when_not():
    links = Links(allreduce=1e9, p2p=1e9)
    layers = _layers(8)
    roomy = choose(layers, 4, 64, links, cap=1 << 30, tp_split={})
    assert roomy.strategy == Strategy(dp=4)
    assert roomy.candidates[0]["verdict"] == "chosen" or any(c["verdict"] == "chosen" for c in roomy.candidates)
    # 8 layers x 16 KB of state: 128 KB does not fit in 100 KB, sharded 4 ways it does
    tight = choose(layers, 4, 64, links, cap=100_000, tp_split={})
    assert tight.strategy.fsdp > 1 or tight.strategy.pp > 1
    assert any("plain data parallelism does not fit" in r for r in tight.reasons)
    text = str(tight)
    assert "why:" in text and "candidates:" in text and "does not fit" in text


def test_a_model_that_fits_nowhere_names_the_layer_and_shortfall():
    links = Links(allreduce=1e9, p2p=1e9)
    layers = _layers(4) + [LayerStats("lm_head", 10**7, 4 * 10**7, 4 * 10**7, 8 * 10**7, 10.0, 0, 1e-4, 10)]
    with pytest.raises(parallel.NoPlanError, match="lm_head"):
        choose(layers, 2, 8, links, cap=1 << 20, tp_split={})


def test_factorizations_cover_every_layout():
    got = factorizations(4)
    assert len(got) == len(set(got)) == 10
    assert all(pp * dp * fsdp * tp == 4 for pp, dp, fsdp, tp in got)


@pytest.mark.timeout(180)
def test_auto_plan_on_a_mesh_prints_saves_loads_and_trains(rt, tmp_path):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    data = batches()
    plan = parallel.plan(mlp, procs, data[0], "auto", optimizer=adamw, loss_fn=mse)
    assert plan.strategy.size == 2 and plan.step_s > 0
    assert plan.measured["links"]["allreduce"] > 0 and plan.layers == ["0", "1", "2", "3", "4"]
    text = str(plan)
    assert str(plan.strategy) in text and "links:" in text and "why:" in text
    plan.save(str(tmp_path / "plan.json"))
    loaded = Plan.load(str(tmp_path / "plan.json"))
    assert loaded.strategy == plan.strategy and str(loaded) == text
    given = parallel.plan(mlp, procs, data[0], Strategy(dp=2), optimizer=adamw, loss_fn=mse)
    assert given.strategy == Strategy(dp=2) and "was given" in given.reasons[0]
    trainer = parallel.Trainer(mlp, procs, loaded, optimizer=adamw, loss_fn=mse)
    losses = [trainer.step(b).get(timeout=120) for b in data]
    assert_same_training(losses, trainer.state_dict().get(timeout=60), *single_process(mlp, data))
    procs.stop().get(timeout=30)


@pytest.mark.timeout(180)
def test_a_pipeline_plan_lays_out_stages_that_the_trainer_follows(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    data = batches()
    plan = parallel.plan(deep_mlp, procs, data[0], Strategy(pp=2, microbatches=4, schedule="gpipe"),
                         optimizer=adamw, loss_fn=mse)
    assert [st["ranks"] for st in plan.stages] == [[0], [1]]
    first, second = (st["layers"] for st in plan.stages)
    assert first[0] == "0" and second[-1] == "8" and first + second == plan.layers
    assert "stage" in str(plan) and plan.stages[0]["memory"] > 0
    trainer = parallel.Trainer(deep_mlp, procs, plan, optimizer=adamw, loss_fn=mse)
    losses = [trainer.step(b).get(timeout=120) for b in data]
    assert_same_training(losses, trainer.state_dict().get(timeout=60), *single_process(deep_mlp, data))
    procs.stop().get(timeout=30)


def test_tensor_parallel_pairs_only_across_elementwise_layers():
    """A softmax or a norm between two Linears sees all features: splitting the pair
    around it gave wrong numbers without a word."""
    from meshrt.parallel.tensor_plan import linear_pairs

    nn = torch.nn
    assert linear_pairs(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.0), nn.Linear(16, 4))) == [
        (["0"], "3")]
    assert linear_pairs(nn.Sequential(nn.Linear(8, 16), nn.Softmax(dim=-1), nn.Linear(16, 4))) == []
    assert linear_pairs(nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16, elementwise_affine=False),
                                      nn.Linear(16, 4), nn.Tanh(), nn.Linear(4, 4))) == [(["2"], "4")]


def test_pipeline_stages_refuse_what_they_would_get_wrong():
    from meshrt.parallel.pipeline import PipelineLayoutError, check_pipelinable, starts_from_plan

    nn = torch.nn
    shared = nn.Linear(8, 8)
    with pytest.raises(PipelineLayoutError, match="uses one module at two positions"):
        check_pipelinable(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), shared, nn.Tanh(), shared, nn.Linear(8, 4)))
    assert starts_from_plan(mlp(), [["0"], ["1", "2", "3", "4"]]) == [0, 1]
    with pytest.raises(PipelineLayoutError, match="made for another model"):
        starts_from_plan(deep_mlp(), [["0"], ["1", "2", "3", "4"]])
