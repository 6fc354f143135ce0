"""meshrt.parallel on 4 CPU processes (gloo): every strategy trains exactly like one
process does, the planner explains itself, checkpoints resume, a death is named."""

from __future__ import annotations

import functools
import os

import pytest

torch = pytest.importorskip("torch")

import meshrt  # noqa: E402
from meshrt import exceptions, parallel, this_host  # noqa: E402
from meshrt.parallel import Strategy  # noqa: E402

STEPS = 3


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                               torch.nn.Tanh(), torch.nn.Linear(32, 4))


def deep_mlp():
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(8, 8), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(8, 4))


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2)


def mse(out, batch):
    return torch.nn.functional.mse_loss(out, batch[1])


def batches(n=STEPS, size=16):
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(size, 8, generator=g), torch.randn(size, 4, generator=g)) for _ in range(n)]


def single_process(model_fn, data, seed=0):
    torch.manual_seed(seed)
    model = model_fn()
    opt = adamw(model.parameters())
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = mse(model(x), (x, y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.state_dict()


def assert_same_training(losses, state, want_losses, want_state):
    assert losses == pytest.approx(want_losses, rel=1e-4, abs=1e-6)
    assert set(state) == set(want_state)
    for name, want in want_state.items():
        torch.testing.assert_close(state[name], want, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("degrees", [dict(dp=4), dict(fsdp=4), dict(tp=2, dp=2), dict(tp=2, fsdp=2),
                                     dict(dp=2, fsdp=2), dict(pp=2, dp=2, schedule="gpipe"),
                                     dict(pp=2, fsdp=2, microbatches=4), dict(pp=4, schedule="1f1b"),
                                     dict(pp=2, tp=2, microbatches=4)],
                         ids=["dp4", "fsdp4", "tp2xdp2", "tp2xfsdp2", "hsdp2x2", "pp2xdp2-gpipe",
                              "pp2xfsdp2", "pp4-1f1b", "pp2xtp2"])
def test_strategy_matches_single_process(rt, degrees):
    model_fn = deep_mlp if degrees.get("pp", 1) > 2 or degrees.get("tp", 1) * degrees.get("pp", 1) > 2 else mlp
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    trainer = parallel.Trainer(model_fn, procs, Strategy(**degrees), optimizer=adamw, loss_fn=mse)
    data = batches()
    losses = [trainer.step(b).get(timeout=120) for b in data]
    state = trainer.state_dict().get(timeout=60)
    assert_same_training(losses, state, *single_process(model_fn, data))
    procs.stop().get(timeout=30)


async def test_trainer_steps_are_awaitable_and_ordered(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    trainer = parallel.Trainer(mlp, procs, Strategy(dp=2), optimizer=adamw, loss_fn=mse)
    data = batches()
    futures = [trainer.step(b, track_memory=i == 1) for i, b in enumerate(data)]  # run in issue order
    losses = [await f for f in futures]
    state = await trainer.state_dict()
    assert_same_training(losses, state, *single_process(mlp, data))
    stats = await trainer.stats()
    params = sum(p.numel() * 4 for p in mlp().parameters())
    assert [s["rank"] for s in stats] == [0, 1]
    # parameters, gradients and AdamW's two moments at least, all replicated under dp
    assert all(s["peak_tensor_bytes"] >= 3 * params and s["peak_rss"] >= s["base_rss"] for s in stats)
    await procs.stop()


def test_bad_degrees_and_batches_are_named(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    with pytest.raises(ValueError, match="multiply to 2"):
        parallel.Trainer(mlp, procs, Strategy(dp=4), optimizer=adamw, loss_fn=mse)
    with pytest.raises(ValueError, match="a degree must be an int >= 1"):
        Strategy(tp=0)
    with pytest.raises(ValueError, match="schedule"):
        Strategy(pp=2, schedule="zigzag")
    trainer = parallel.Trainer(mlp, procs, Strategy(dp=2), optimizer=adamw, loss_fn=mse)
    with pytest.raises(ValueError, match="multiple of 2"):
        trainer.step((torch.randn(3, 8), torch.randn(3, 4)))
    with pytest.raises(parallel.TensorParallelError, match="does not divide"):
        parallel.Trainer(lambda: torch.nn.Sequential(torch.nn.Linear(8, 3), torch.nn.Linear(3, 4)),
                         procs, Strategy(tp=2), optimizer=adamw, loss_fn=mse).ready().get(timeout=120)
    procs.stop().get(timeout=30)


@pytest.mark.timeout(240)
def test_checkpoint_resumes_on_a_new_mesh_after_a_death(rt, tmp_path):
    data = batches(4)
    want_losses, want_state = single_process(mlp, data)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    flag = tmp_path / "die"
    trainer = parallel.Trainer(mlp, procs, Strategy(fsdp=2), optimizer=adamw,
                               loss_fn=functools.partial(_dies_on_flag, str(flag)))
    losses = [trainer.step(b).get(timeout=120) for b in data[:2]]
    trainer.save(str(tmp_path / "ckpt")).get(timeout=60)
    flag.write_text("1")
    with pytest.raises(exceptions.ActorDiedError, match=r"stage 0, rank 1 \(pp=0, dp=0, fsdp=1, tp=0\)"):
        trainer.step(data[2]).get(timeout=120)
    with pytest.raises(exceptions.ActorDiedError):  # a broken trainer says so again
        trainer.step(data[2]).get(timeout=30)
    procs2 = this_host().spawn_procs(per_host={"gpus": 2})
    resumed = parallel.Trainer.load(str(tmp_path / "ckpt"), procs2, mlp, optimizer=adamw, loss_fn=mse)
    assert resumed.strategy == Strategy(fsdp=2)
    losses += [resumed.step(b).get(timeout=120) for b in data[2:]]
    assert_same_training(losses, resumed.state_dict().get(timeout=60), want_losses, want_state)
    procs2.stop().get(timeout=30)


@pytest.mark.timeout(240)
def test_a_pipeline_checkpoint_resumes_as_a_pipeline(rt, tmp_path):
    """Each stage has a param group 0 of its own: under one key, one was lost and a
    resumed stage failed in optimizer.step() (KeyError 'betas')."""
    data = batches(4)
    want_losses, want_state = single_process(mlp, data)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    trainer = parallel.Trainer(mlp, procs, Strategy(pp=2, microbatches=2), optimizer=adamw, loss_fn=mse)
    losses = [trainer.step(b).get(timeout=120) for b in data[:2]]
    trainer.save(str(tmp_path / "ckpt")).get(timeout=60)
    procs.stop().get(timeout=30)
    procs2 = this_host().spawn_procs(per_host={"gpus": 2})
    resumed = parallel.Trainer.load(str(tmp_path / "ckpt"), procs2, mlp, optimizer=adamw, loss_fn=mse)
    assert resumed.strategy.pp == 2
    losses += [resumed.step(b).get(timeout=120) for b in data[2:]]
    assert_same_training(losses, resumed.state_dict().get(timeout=60), want_losses, want_state)
    procs2.stop().get(timeout=30)


@pytest.mark.timeout(240)
def test_a_rank_that_raises_alone_breaks_the_trainer_instead_of_hanging_it(rt, tmp_path):
    """Rank 1's loss raises; rank 0 waits in DDP's all-reduce for it: the next step hung
    (for gloo's 30 minutes). The failure is raised, then the trainer says it is broken."""
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    flag = tmp_path / "raise"
    trainer = parallel.Trainer(mlp, procs, Strategy(dp=2), optimizer=adamw,
                               loss_fn=functools.partial(_raises_on_flag, str(flag)))
    data = batches(2)
    trainer.step(data[0]).get(timeout=120)
    flag.write_text("1")
    with pytest.raises(exceptions.TaskError, match="boom on rank 1"):
        trainer.step(data[1]).get(timeout=120)
    with pytest.raises(exceptions.ActorDiedError, match=r"failed on rank 1 .*still in a collective"):
        trainer.step(data[1]).get(timeout=30)
    procs.stop().get(timeout=30)


def _raises_on_flag(flag, out, batch):
    if os.path.exists(flag) and meshrt.current_rank().rank == 1:
        raise RuntimeError("boom on rank 1")
    return mse(out, batch)


def _dies_on_flag(flag, out, batch):
    if os.path.exists(flag) and meshrt.current_rank().rank == 1:
        os._exit(3)
    return mse(out, batch)


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=4, n_embd=32, n_head=4, vocab_size=64, n_positions=16, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def lm_loss(out, batch):
    return out.loss


def lm_batches(seed):
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(2):
        ids = torch.randint(0, 64, (8, 16), generator=g)
        data.append({"input_ids": ids, "labels": ids})
    return data


def lm_single_process(model_fn, data):
    torch.manual_seed(0)
    model = model_fn()
    opt = sgd(model.parameters())
    losses = []
    for b in data:
        opt.zero_grad()
        loss = model(**b).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.state_dict()


def assert_same_lm_training(losses, state, want_losses, want_state):
    assert losses == pytest.approx(want_losses, rel=1e-4)
    # every weight, in the model's own names and layout (tied ones under both names)
    assert set(state) == set(want_state)
    for name, want in want_state.items():
        torch.testing.assert_close(state[name], want, rtol=1e-4, atol=1e-5, msg=name)


def assert_lm_trains_like_one_process(model_fn, procs, plan, data):
    trainer = parallel.Trainer(model_fn, procs, plan, optimizer=sgd, loss_fn=lm_loss)
    losses = [trainer.step(b).get(timeout=120) for b in data]
    assert_same_lm_training(losses, trainer.state_dict().get(timeout=60), *lm_single_process(model_fn, data))
    procs.stop().get(timeout=30)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("degrees", [dict(dp=4), dict(fsdp=4), dict(tp=2, dp=2), dict(tp=2, fsdp=2),
                                     dict(pp=2, dp=2, schedule="gpipe"), dict(pp=4, schedule="1f1b"),
                                     dict(pp=2, tp=2)],
                         ids=["dp4", "fsdp4", "tp2xdp2", "tp2xfsdp2", "pp2xdp2-gpipe", "pp4-1f1b", "pp2xtp2"])
def test_tiny_gpt2_matches_single_process(rt, degrees):
    """GPT-2 from its config: tied embedding and head (kept tied across pipeline stages),
    fused Conv1D attention (split by heads under tp)."""
    pytest.importorskip("transformers")
    data = lm_batches(3)
    strategy = Strategy(**degrees)
    procs = this_host().spawn_procs(per_host={"gpus": strategy.size})
    # SGD: Adam would turn the (mathematically zero) gradient of the key bias, noise at
    # the 1e-9 level that differs with the batch split, into full-size steps.
    assert_lm_trains_like_one_process(tiny_gpt2, procs, strategy, data)


class NotAChain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.b(self.a(x) + x)


@pytest.mark.timeout(240)
def test_pipeline_refusals_name_the_fix(rt):
    pytest.importorskip("transformers")
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    with pytest.raises(ValueError, match="needs an nn.Sequential model or a Hugging Face GPT-2 or Llama"):
        parallel.Trainer(NotAChain, procs, Strategy(pp=2), optimizer=sgd, loss_fn=mse).ready().get(timeout=120)
    trainer = parallel.Trainer(tiny_gpt2, procs, Strategy(pp=2), optimizer=sgd, loss_fn=lm_loss)
    batch = lm_batches(1)[0]
    padded = dict(batch, attention_mask=torch.ones_like(batch["input_ids"]))
    padded["attention_mask"][0, -3:] = 0
    with pytest.raises(ValueError, match="attention_mask pads some of them"):
        trainer.step(padded)
    with pytest.raises(ValueError, match="also has token_type_ids"):
        trainer.step(dict(batch, token_type_ids=torch.zeros_like(batch["input_ids"])))
    assert trainer.step(dict(batch, attention_mask=torch.ones_like(batch["input_ids"]))).get(timeout=120) > 0
    procs.stop().get(timeout=30)


@pytest.mark.timeout(300)
def test_tiny_gpt2_auto_plan_matches_single_process(rt):
    pytest.importorskip("transformers")
    data = lm_batches(5)
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    plan = parallel.plan(tiny_gpt2, procs, data[0], optimizer=sgd, loss_fn=lm_loss)
    assert "transformer.h.0" in str(plan) or plan.strategy.pp == 1
    assert_lm_trains_like_one_process(tiny_gpt2, procs, plan, data)


@pytest.mark.timeout(240)
def test_gpt2_pipeline_plan_keeps_embeddings_with_the_first_block(rt):
    """A plan for GPT-2 cuts only between blocks, and the trainer follows it."""
    pytest.importorskip("transformers")
    data = lm_batches(6)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    plan = parallel.plan(tiny_gpt2, procs, data[0], Strategy(pp=2, microbatches=2), optimizer=sgd,
                         loss_fn=lm_loss)
    first, last = plan.stages[0]["layers"], plan.stages[-1]["layers"]
    assert first[0].startswith("transformer.wte+transformer.wpe+transformer.h.0")
    assert last[-1].endswith("+transformer.ln_f+lm_head")
    assert_lm_trains_like_one_process(tiny_gpt2, procs, plan, data)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("degrees", [dict(dp=2), dict(pp=2)], ids=["dp2", "pp2"])
def test_compiled_stages_match_single_process(rt, degrees):
    pytest.importorskip("torch._inductor")
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    trainer = parallel.Trainer(mlp, procs, Strategy(**degrees, compile=True), optimizer=adamw, loss_fn=mse)
    data = batches()
    losses = [trainer.step(b).get(timeout=240) for b in data]
    assert_same_training(losses, trainer.state_dict().get(timeout=60), *single_process(mlp, data))
    procs.stop().get(timeout=30)


def tiny_llama(tied=False, layers=2):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=layers, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=64, max_position_embeddings=16,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0, tie_word_embeddings=tied)
    return LlamaForCausalLM(config)


def tied_llama():
    return tiny_llama(tied=True, layers=4)


@pytest.mark.timeout(240)
def test_tiny_llama_with_tensor_parallelism_matches_single_process(rt):
    pytest.importorskip("transformers")
    data = lm_batches(4)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    assert_lm_trains_like_one_process(tiny_llama, procs, Strategy(tp=2), data)


@pytest.mark.timeout(240)
def test_tied_llama_pipeline_with_tensor_parallel_stages_matches_single_process(rt):
    pytest.importorskip("transformers")
    data = lm_batches(7)
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    assert_lm_trains_like_one_process(tied_llama, procs, Strategy(pp=2, tp=2, microbatches=2), data)


@pytest.mark.timeout(300)
def test_dp_tp_pp_together_on_eight_processes(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 8})
    trainer = parallel.Trainer(deep_mlp, procs, Strategy(dp=2, tp=2, pp=2, microbatches=2),
                               optimizer=adamw, loss_fn=mse)
    data = batches()
    losses = [trainer.step(b).get(timeout=200) for b in data]
    assert_same_training(losses, trainer.state_dict().get(timeout=60), *single_process(deep_mlp, data))
    procs.stop().get(timeout=60)


def lit_regressor():
    import lightning as L

    class LitRegressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return {"loss": loss}

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return LitRegressor()


@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore::UserWarning")  # self.log outside a Lightning Trainer warns
@pytest.mark.parametrize("degrees", [dict(dp=2), dict(fsdp=2), dict(tp=2)], ids=["dp2", "fsdp2", "tp2"])
def test_lightning_module_trains_like_one_process(rt, degrees):
    pytest.importorskip("lightning")
    data = batches(3)
    torch.manual_seed(0)
    module = lit_regressor()
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    want = []
    for i, b in enumerate(data):
        opt.zero_grad()
        loss = module.training_step(b, i)["loss"]
        loss.backward()
        opt.step()
        sched.step()
        want.append(loss.item())
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    trainer = parallel.Trainer(parallel.lightning(lit_regressor), procs, Strategy(**degrees))
    losses = [trainer.step(b).get(timeout=120) for b in data]
    state = trainer.state_dict().get(timeout=60)
    assert losses == pytest.approx(want, rel=1e-4)
    assert set(state) == set(module.state_dict())  # the LightningModule's own names
    for name, value in module.state_dict().items():
        torch.testing.assert_close(state[name], value, rtol=1e-4, atol=1e-5, msg=name)
    procs.stop().get(timeout=30)


@pytest.mark.timeout(240)
def test_two_trainers_and_a_plan_on_one_mesh_take_turns(rt):
    """Their collectives (process-group set-up, steps, link measurements) must reach every
    process in one order: made at once, they would otherwise deadlock."""
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    data = batches()
    first = parallel.Trainer(mlp, procs, Strategy(dp=2), optimizer=adamw, loss_fn=mse)
    second = parallel.Trainer(mlp, procs, Strategy(fsdp=2), optimizer=adamw, loss_fn=mse)
    steps = [t.step(b) for b in data for t in (first, second)]
    plan = parallel.plan(mlp, procs, data[0], Strategy(tp=2), optimizer=adamw, loss_fn=mse)
    want_losses, want_state = single_process(mlp, data)
    losses = [f.get(timeout=120) for f in steps]
    assert_same_training(losses[0::2], first.state_dict().get(timeout=60), want_losses, want_state)
    assert_same_training(losses[1::2], second.state_dict().get(timeout=60), want_losses, want_state)
    assert plan.strategy == Strategy(tp=2)
    procs.stop().get(timeout=30)
