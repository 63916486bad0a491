"""The prepared GPU check (issue 18): one script, under 8 minutes on one H200, printing JSON.

- ``grpo``: bf16 GRPO steps (fp32 master weights, bf16 engine) on a randomly initialised model
  of Qwen3-0.6B's shape: generation tokens/s, update tokens/s, the update's model FLOP
  utilisation against the GPU's bf16 dense peak (``6 N`` FLOPs a token of the forward and
  backward, ``N`` the parameters), peak memory, and the step's train/inference mismatch;
- ``gap``: mean |fp32 - bf16| trainer log-prob on the same sampled tokens;
- each log-prob comparison also reports ``largest_logprob`` (max |log-prob| compared), the
  scale its rounding bound is a multiple of (docs/testing.md);
- ``routing_replay``: a bf16 engine against a bf16 trainer on the tiny Qwen3-MoE, worst and mean
  token gap with and without routing replay, beside the dense Qwen3 of the same size;
- ``resume``: two optimiser steps straight against one step, a checkpoint, a fresh trainer
  loaded from it and the second step: the largest weight difference (0 when exact);
- ``sleep``: the torch engine's weights bytes, the device memory its ``sleep`` frees (the
  allocator's count on CUDA), and a verified sync that wakes it (its probe mismatch);
- ``trl``: a GRPO step of posttrain and one of TRL's ``GRPOTrainer`` on the same model (Qwen3
  of 0.6B's shape with the tiny tokenizer's vocabulary), prompts, group size and completion
  length, in bf16 on the device: seconds a step and posttrain's phases (generation, update,
  weight sync), and the ratio (an ``error`` entry where TRL cannot run);
- ``helpers``: a reward model, a distillation teacher's scores and its full distributions
  with the model on the device and the batch on the CPU, against the same on the CPU (fp32:
  only kernel rounding may differ);
- ``speculative``: an MTP head self-distilled for 60 steps under bf16 autocast on the device
  (its first and last ``mtp_loss``), then a bf16 ``TorchEngine`` on the device decoding 32
  prompts greedily with 2 drafts a round against plain decoding: the share of completions
  that are the same (near ties in bf16 may differ), the acceptance rate, tokens a forward and
  tokens/s of each;
- ``tinker``: ``posttrain tinker-serve``'s service on the device driven by the tinker SDK
  (``gpu_tinker.py``), on Qwen3-0.6B's shape with its whole vocabulary;
- ``quick``: a bf16 ``TorchEngine`` on the device answering ``<action>`` and ``<query>``
  from the KV cache of 32 prompts, after each prompt and after each completion, against
  separate requests that prefill the sequence again: the share of answers that are the same
  (near ties in bf16 may differ) and the prefill tokens each way.

    python benchmarks/gpu_check.py                  # cuda, Qwen3-0.6B shape
    python benchmarks/gpu_check.py --device cpu --tiny   # the same code on a tiny model (CI)
    python benchmarks/gpu_check.py --only trl --out trl.json   # one section, kept as it goes

A section that raises reports ``error`` and the others still run.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from posttrain.config import OptimConfig, TrainerConfig
from posttrain.engines import TorchEngine
from posttrain.engines.sleep import held_bytes
from posttrain.models import build_tiny, load_model, load_tokenizer, load_value_model
from posttrain.recipes.distillation.teachers import Teacher, model_targets
from posttrain.recipes.sampling_loop import sync_weights
from posttrain.rollout.wrappers.judged import RewardModelJudge
from posttrain.train import Trainer, load_checkpoint_state, save_checkpoint
from posttrain.train.rl_update import policy_steps
from posttrain.types import Batch, Episode, SamplingParams, Segment

sys.path.insert(0, str(Path(__file__).parent))
from gpu_tinker import tinker_section  # noqa: E402

# bf16 dense peak FLOP/s by device name (vendor figures, without sparsity)
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
QWEN3_06B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                 num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, max_position_embeddings=4096, tie_word_embeddings=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def policy(tiny: bool, tmp: Path):
    """``(model, pad_id, eos_id, vocab)``: the tiny micro Qwen3, or Qwen3-0.6B's shape."""
    if tiny:
        d = build_tiny(tmp / "policy", "micro", architecture="qwen3")
        tok = load_tokenizer(d)
        return load_model(d), tok.pad_token_id, tok.eos_token_id, len(tok)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**QWEN3_06B))
    return model, 0, None, QWEN3_06B["vocab_size"]


def largest(logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """max |log-prob| over the masked tokens."""
    return float(logprobs[mask > 0].abs().max())


def sampled_batch(engine: TorchEngine, pad_id: int, vocab: int, prompts: int, prompt_len: int,
                  new_tokens: int) -> tuple[Batch, float]:
    """Random prompts, their completions as a batch with random advantages, and the
    generation seconds."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(8, vocab, (prompts, prompt_len), generator=g).tolist()
    sync(engine.device)
    start = time.perf_counter()
    outs = engine.generate(ids, SamplingParams(max_new_tokens=new_tokens, seed=0))
    sync(engine.device)
    seconds = time.perf_counter() - start
    segs = [Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs) for o in outs]
    batch = Batch.from_episodes([Episode([s], reward=float(i % 2), group_id=str(i // 4))
                                 for i, s in enumerate(segs)], pad_id)
    adv = torch.randn(len(batch), generator=g)[:, None] * batch.loss_mask
    return batch.replace(advantages=adv), seconds


def grpo(device: torch.device, tiny: bool, tmp: Path) -> dict:
    model, pad_id, eos_id, vocab = policy(tiny, tmp)
    n_params = sum(p.numel() for p in model.parameters())
    prompts, prompt_len, new_tokens = (8, 16, 16) if tiny else (64, 256, 512)
    settings = TrainerConfig(device=str(device), precision="bf16", micro_batch_size=8,
                             share_prefix=False)
    trainer = Trainer(model, OptimConfig(lr=1e-5, warmup_steps=0), 10, settings)
    engine = TorchEngine(trainer.model, pad_id, eos_id, dtype=torch.bfloat16, device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    batch, gen_s = sampled_batch(engine, pad_id, vocab, prompts, prompt_len, new_tokens)
    generated = int(batch.loss_mask.sum())
    steps, update_s, history = 3, 0.0, []
    for _ in range(steps):
        sync(device)
        start = time.perf_counter()
        history.append(trainer.apply(policy_steps, batch))
        sync(device)
        update_s += time.perf_counter() - start
        engine.update_weights(trainer.named_weights(), trainer.step)
    scored = int(batch.attention_mask.sum()) * steps
    flops = 6 * n_params * scored
    peak = peak_flops(device)
    return {
        "params": n_params, "prompts": prompts, "prompt_tokens": prompt_len,
        "generated_tokens": generated,
        "generation_tokens_per_s": generated / gen_s,
        "update_tokens_per_s": scored / update_s,
        "update_seconds_per_step": update_s / steps,
        "update_mfu": None if peak is None else flops / update_s / peak,
        "peak_memory_gib": (torch.cuda.max_memory_allocated(device) / 2**30
                            if device.type == "cuda" else None),
        "mismatch": history[0].get("mismatch"),  # the first step's: on-policy samples
        "largest_logprob": largest(batch.behaviour_logprobs, batch.loss_mask),
        "loss": history[-1]["loss"],
    }


def gap(device: torch.device, tmp: Path) -> dict:
    d = build_tiny(tmp / "gap", "micro", architecture="qwen3")
    tok, model = load_tokenizer(d), load_model(d)
    engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id, device=device)
    batch, _ = sampled_batch(engine, tok.pad_token_id, len(tok), 16, 12, 24)
    lp = {p: Trainer(copy.deepcopy(model), OptimConfig(), 1, TrainerConfig(
        device=str(device), precision=p)).compute_logprobs(batch) for p in ("fp32", "bf16")}
    m = batch.loss_mask > 0
    return {"fp32_vs_bf16_mean": float((lp["fp32"][m] - lp["bf16"][m]).abs().mean()),
            "largest_logprob": largest(lp["fp32"], batch.loss_mask)}


def routing_replay(device: torch.device, tmp: Path) -> dict:
    out = {}
    for arch in ("qwen3_moe", "qwen3"):
        d = build_tiny(tmp / arch, "nano", architecture=arch)
        tok, model = load_tokenizer(d), load_model(d)
        moe = arch == "qwen3_moe"
        engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id, dtype=torch.bfloat16,
                             record_routing=moe, device=device)
        prompts = [tok.encode(f"What is {i}+{i + 3}?") for i in range(32)]
        outs = engine.generate(prompts, SamplingParams(max_new_tokens=24, seed=1))
        segs = [Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs,
                                               routing=o.routing) for o in outs]
        batch = Batch.from_episodes([Episode([s]) for s in segs], tok.pad_token_id)
        m = batch.loss_mask > 0
        for replay in ((False, True) if moe else (False,)):
            trainer = Trainer(copy.deepcopy(model), OptimConfig(), 1, TrainerConfig(
                device=str(device), precision="bf16", routing_replay=replay))
            g = (trainer.compute_logprobs(batch)[m] - batch.behaviour_logprobs[m]).abs()
            key = f"{arch}{'_replay' if replay else ''}"
            out[key] = {"mean": float(g.mean()), "max": float(g.max())}
    return out


def resume(device: torch.device, tmp: Path) -> dict:
    d = build_tiny(tmp / "resume", "nano", architecture="qwen3")
    tok = load_tokenizer(d)
    engine = TorchEngine(load_model(d), tok.pad_token_id, tok.eos_token_id, device=device)
    batch, _ = sampled_batch(engine, tok.pad_token_id, len(tok), 8, 8, 8)
    settings = TrainerConfig(device=str(device), precision="bf16")
    optim = OptimConfig(lr=1e-3, warmup_steps=0)

    def trainer(model_dir: Path) -> Trainer:
        return Trainer(load_model(model_dir), optim, 2, settings)

    straight = trainer(d)
    for _ in range(2):
        straight.apply(policy_steps, batch)
    first = trainer(d)
    first.apply(policy_steps, batch)
    ckpt = save_checkpoint(tmp / "ckpt", first, tok, {"step": 1}, "step-1")
    resumed = trainer(ckpt)
    load_checkpoint_state(ckpt, resumed)
    resumed.apply(policy_steps, batch)
    with torch.no_grad():
        diff = max(float((a - b).abs().max()) for a, b in zip(straight.model.parameters(),
                                                               resumed.model.parameters()))
    return {"max_weight_difference": diff}


def sleep(device: torch.device, tmp: Path) -> dict:
    d = build_tiny(tmp / "sleep", "micro", architecture="qwen3")
    tok = load_tokenizer(d)
    engine = TorchEngine(load_model(d), tok.pad_token_id, tok.eos_token_id, device=device)
    weights = held_bytes(engine.model.parameters())

    def allocated() -> int:
        if device.type == "cuda":
            sync(device)
            return torch.cuda.memory_allocated(device)
        return held_bytes(engine.model.parameters())

    awake = allocated()
    engine.sleep()
    freed = awake - allocated()
    trainer = Trainer(load_model(d), OptimConfig(), 1, TrainerConfig(device=str(device)))
    probes = [[1, 5, 9, 13, 2], [4, 4, 8]]
    report = sync_weights(trainer, engine, 1, probes)
    return {"weights_bytes": weights, "freed_bytes": freed,
            "held_after_sync": held_bytes(engine.model.parameters()),
            "mismatch_after_sync": report.mismatch,
            "largest_logprob": max(abs(x) for row in engine.score(probes) for x in row[1:])}


def helpers(device: torch.device, tmp: Path) -> dict:
    d = build_tiny(tmp / "helpers", "nano", architecture="qwen3")
    tok = load_tokenizer(d)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(8, len(tok), (8, 8), generator=g).tolist()
    outs = TorchEngine(load_model(d), tok.pad_token_id, tok.eos_token_id).generate(
        ids, SamplingParams(max_new_tokens=8, seed=0))
    episodes = [Episode([Segment.from_prompt_completion(o.prompt_ids, o.token_ids)])
                for o in outs]
    batch = Batch.from_episodes(episodes, tok.pad_token_id)
    sequences = [o.prompt_ids + o.token_ids for o in outs]
    value_model, out = load_value_model(d), {}  # one fresh value head, on both sides
    for where in ("cpu", device):
        judge = RewardModelJudge(copy.deepcopy(value_model).to(where), tok.pad_token_id)
        teacher = Teacher("t", model=load_model(d).to(where))
        targets = model_targets(teacher.model)(batch)[0][2]
        out[str(where)] = (torch.tensor(judge(episodes, [None] * len(episodes))),
                           torch.tensor([x for row in teacher.score(sequences, tok.pad_token_id)
                                         for x in row]), targets.cpu())
    cpu, there = out["cpu"], out[str(device)]
    return {name: float((a - b).abs().max()) for name, a, b in
            zip(("reward_model", "teacher_score", "teacher_distributions"), cpu, there)}


def policy_dir(d: Path, tiny: bool, full_vocab: bool) -> tuple[Path, int]:
    """``(directory, vocabulary)`` of the tiny micro Qwen3 and its tokenizer; unless ``tiny``,
    its weights replaced by a random model of Qwen3-0.6B's shape, with Qwen3's vocabulary
    (``full_vocab``: the tokenizer's ids are its first ones) or the tokenizer's."""
    build_tiny(d, "micro", architecture="qwen3")
    vocab = len(load_tokenizer(d))
    if not tiny:
        vocab = QWEN3_06B["vocab_size"] if full_vocab else vocab
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(Qwen3Config(**{**QWEN3_06B, "vocab_size": vocab}))\
            .save_pretrained(d)
    return d, vocab


def side_by_side(device: torch.device, tiny: bool, tmp: Path) -> dict:
    d, _ = policy_dir(tmp / "trl", tiny, full_vocab=False)
    prompts = [[{"role": "user", "content": f"What is {a}+{b}?"}] for a, b in
               zip(range(11, 27), range(40, 56))]
    group, new_tokens, steps = (4, 8, 2) if tiny else (8, 128, 2)
    bf16 = device.type == "cuda"
    out = {"prompts": len(prompts), "group_size": group, "new_tokens": new_tokens}
    phases = posttrain_grpo_step(d, device, prompts, group, new_tokens, steps)
    out["posttrain_step_s"] = sum(phases.values())
    out |= {f"posttrain_{k}_s": v for k, v in phases.items()}
    try:
        out["trl_step_s"] = trl_grpo_step(d, device, prompts, group, new_tokens, steps, bf16)
    except Exception as exc:  # reported, not hidden: the check's other sections still count
        out["trl_error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["speedup_vs_trl"] = out["trl_step_s"] / out["posttrain_step_s"]
    return out


def posttrain_grpo_step(d: Path, device: torch.device, prompts: list, group: int,
                        new_tokens: int, steps: int) -> dict[str, float]:
    """Seconds of a GRPO step's phases after a warm-up: ``generation`` (with the
    advantages), ``update`` and ``weight_sync``."""
    from posttrain.algos import get
    from posttrain.models import encode_prompt

    tok = load_tokenizer(d)
    precision = "bf16" if device.type == "cuda" else "fp32"
    trainer = Trainer(load_model(d), OptimConfig(lr=1e-6, warmup_steps=0), steps + 1,
                      TrainerConfig(device=str(device), precision=precision,
                                    micro_batch_size=len(prompts) * group))
    engine = TorchEngine(trainer.model, tok.pad_token_id, tok.eos_token_id,
                         dtype=getattr(torch, "bfloat16" if precision == "bf16" else "float32"),
                         device=device)
    ids = [encode_prompt(tok, p) for p in prompts for _ in range(group)]
    phases: dict[str, float] = {"generation": 0.0, "update": 0.0, "weight_sync": 0.0}
    for step in range(steps + 1):
        sync(device)
        start = time.perf_counter()
        outs = engine.generate(ids, SamplingParams(max_new_tokens=new_tokens, seed=step))
        episodes = [Episode([Segment.from_prompt_completion(o.prompt_ids, o.token_ids,
                                                             o.logprobs)],
                            reward=float(len(o.token_ids) % 2), group_id=str(i // group))
                    for i, o in enumerate(outs)]
        batch = Batch.from_episodes(episodes, tok.pad_token_id)
        batch = batch.replace(advantages=get("advantage", "grpo")(
            rewards=batch.rewards, group_ids=batch.group_index, mask=batch.loss_mask))
        sync(device)
        generated = time.perf_counter()
        trainer.apply(policy_steps, batch)
        sync(device)
        updated = time.perf_counter()
        engine.update_weights(trainer.named_weights(), step + 1)
        sync(device)
        if step:  # the first step warms up
            phases["generation"] += (generated - start) / steps
            phases["update"] += (updated - generated) / steps
            phases["weight_sync"] += (time.perf_counter() - updated) / steps
    return phases


def trl_grpo_step(d: Path, device: torch.device, prompts: list, group: int, new_tokens: int,
                  steps: int, bf16: bool) -> float:
    """The same with TRL's ``GRPOTrainer`` (its own generation), from its step callbacks."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            sync(device)
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            sync(device)
            times.append(time.perf_counter() - self.start)

    model = AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.bfloat16 if bf16 else torch.float32)
    args = GRPOConfig(output_dir=str(d / "trl-out"), per_device_train_batch_size=len(prompts) *
                      group, num_generations=group, max_completion_length=new_tokens,
                      max_steps=steps + 1, learning_rate=1e-6, beta=0.0, temperature=1.0,
                      use_cpu=device.type == "cpu", bf16=bf16, report_to=[],
                      logging_steps=1000, save_strategy="no", dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, processing_class=AutoTokenizer.from_pretrained(d),
                          args=args, train_dataset=Dataset.from_list([{"prompt": p}
                                                                      for p in prompts]),
                          reward_funcs=[lambda completions, **kw: [float(len(str(c)) % 2)
                                                                  for c in completions]],
                          callbacks=[Timer()])
    with contextlib.redirect_stdout(sys.stderr):  # TRL prints; stdout stays the JSON
        trainer.train()
    return sum(times[1:]) / steps


def speculative(device: torch.device, tmp: Path) -> dict:
    from posttrain.models.mtp import MTPHead, mtp_loss

    d = build_tiny(tmp / "speculative", "small")
    model = load_model(d).to(device)
    head = MTPHead.for_model(model).float()
    optim = torch.optim.AdamW(head.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(60):
        ids = torch.randint(8, model.config.vocab_size, (16, 64), generator=g).to(device)
        ones = torch.ones_like(ids)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = mtp_loss(model, head, ids, ones, ones)
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(float(loss))
    tok = load_tokenizer(d)
    prompts = torch.randint(8, model.config.vocab_size, (32, 16), generator=g).tolist()
    greedy = SamplingParams(temperature=0.0, max_new_tokens=64)
    runs = {}
    for name, draft in (("plain", None), ("speculative", head)):
        engine = TorchEngine(model, tok.pad_token_id, None, dtype=torch.bfloat16,
                             device=device, draft=draft, draft_tokens=2)
        engine.generate(prompts[:2], greedy)
        sync(device)
        start = time.perf_counter()
        outs = engine.generate(prompts, greedy)
        sync(device)
        runs[name] = (outs, 32 * 64 / (time.perf_counter() - start), engine.speculative)
    same = sum(a.token_ids == b.token_ids for a, b in zip(runs["plain"][0],
                                                          runs["speculative"][0]))
    stats = runs["speculative"][2]
    return {"mtp_loss_first": losses[0], "mtp_loss_last": losses[-1],
            "same_greedy": same / 32, "acceptance_rate": stats.acceptance_rate,
            "tokens_per_forward": stats.tokens_per_forward,
            "plain_tokens_per_s": runs["plain"][1],
            "speculative_tokens_per_s": runs["speculative"][1]}


def quick(device: torch.device, tmp: Path) -> dict:
    from posttrain.models.quick_tokens import QUICK_TOKENS, quick_token_ids

    d = build_tiny(tmp / "quick", "small", quick_tokens=QUICK_TOKENS)
    tok = load_tokenizer(d)
    engine = TorchEngine(load_model(d), tok.pad_token_id, None, dtype=torch.bfloat16,
                         device=device)
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(8, len(tok) - len(QUICK_TOKENS), (32, 24), generator=g).tolist()
    asked = quick_token_ids(tok, ["<action>", "<query>"])
    reply = SamplingParams(temperature=0.0, max_new_tokens=16)
    short = SamplingParams(temperature=0.0, max_new_tokens=8)
    report = {}
    for at in ("prompt", "completion"):
        outs = engine.generate_quick(prompts, reply, asked, 8, at=at)
        seqs = [o.output.prompt_ids + (o.output.token_ids if at == "completion" else [])
                for o in outs]
        separate = engine.generate([s + [q] for s in seqs for q in asked], short)
        answers = [a for o in outs for a in o.answers]
        report[at] = {"same_answers": sum(a == s.token_ids for a, s in zip(answers, separate))
                      / len(answers),
                      "prefill_quick": (1 if at == "prompt" else 2) * len(answers),
                      "prefill_separate": sum(len(s) + 1 for s in seqs) * len(asked),
                      "prefill_saved": sum(o.prefill_saved for o in outs)}
    return report


SECTIONS = {
    "grpo": lambda device, tiny, tmp: grpo(device, tiny, tmp),
    "gap": lambda device, tiny, tmp: gap(device, tmp),
    "routing_replay": lambda device, tiny, tmp: routing_replay(device, tmp),
    "resume": lambda device, tiny, tmp: resume(device, tmp),
    "sleep": lambda device, tiny, tmp: sleep(device, tmp),
    "helpers": lambda device, tiny, tmp: helpers(device, tmp),
    "speculative": lambda device, tiny, tmp: speculative(device, tmp),
    "quick": lambda device, tiny, tmp: quick(device, tmp),
    "trl": side_by_side,
    "tinker": lambda device, tiny, tmp: tinker_section(
        device, *policy_dir(tmp / "tinker", tiny, full_vocab=True), tiny, tmp),
}


def run_section(name: str, device: torch.device, tiny: bool, tmp: Path) -> dict:
    """One section's report; a section that raises reports ``error`` (and its traceback on
    stderr) so that the others still run: a device lease is short."""
    try:
        return SECTIONS[name](device, tiny, tmp)
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a tiny policy (a CPU dry run)")
    parser.add_argument("--out", type=Path, help="also write the report here after each "
                        "section, so that a run stopped at its time limit leaves what it did")
    parser.add_argument("--only", nargs="+", choices=sorted(SECTIONS), help="these sections")
    args = parser.parse_args()
    device = torch.device(args.device)
    start = time.perf_counter()
    report = {"device": (torch.cuda.get_device_name(device) if device.type == "cuda"
                         else "cpu"), "torch": torch.__version__, "section_seconds": {}}
    with tempfile.TemporaryDirectory() as t:
        for name in args.only or SECTIONS:
            began = time.perf_counter()
            report[name] = run_section(name, device, args.tiny, Path(t))
            report["section_seconds"][name] = time.perf_counter() - began
            report["seconds"] = time.perf_counter() - start
            print(f"[gpu_check] {name}: {report['section_seconds'][name]:.1f} s", file=sys.stderr)
            if args.out:
                args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
