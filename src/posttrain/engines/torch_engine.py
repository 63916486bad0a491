"""``TorchEngine``: in-process batched generation with a KV cache."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Sequence

import torch
from transformers import PreTrainedModel

from posttrain.engines.base import GenerationOutput
from posttrain.engines.decoders import Decoder, HFDecoder, LlamaDecoder, drop_finished
from posttrain.engines.quick import AT as QUICK_AT
from posttrain.engines.quick import QuickOutput, answer
from posttrain.engines.sampling import counter_uniforms, resolve_seeds, sample_tokens
from posttrain.engines.sleep import EngineAsleepError, FreedStorage
from posttrain.engines.speculative import SpeculativeDecoder, SpeculativeStats
from posttrain.engines.weights import WeightsDigest, weights_checksum
from posttrain.models.mtp import MTPHead
from posttrain.models.routing import capture, routers
from posttrain.types import SamplingParams


class TorchEngine:
    """Generates with its own copy of a Hugging Face causal LM.

    Prompts of different lengths share one batch (left padding, explicit position ids);
    identical prompts (a GRPO group) are encoded once and their cache shared; rows that stop
    leave the batch. Row ``i`` samples with seed ``seeds[i]`` (default: ``row_seeds`` of
    ``sampling.seed``) through counter-based draws (``engines.sampling``), so its completion is
    the same whatever else shares the batch and however generation is chunked.

    Decoding a tiny model is overhead-bound, not FLOP-bound, so Llama-family models decode
    through ``LlamaDecoder`` (``fast=False`` or another architecture: ``HFDecoder``, the model's
    own forward). docs/performance.md has the figures.

    With ``draft`` (an ``MTPHead``) it decodes speculatively, ``draft_tokens`` drafts a round
    (``engines.speculative``; Llama-family models): the same distribution, the same greedy
    output, and ``speculative`` counts the drafts accepted. A sampled completion then depends
    on how generation is chunked (rounds restart at a chunk), though not its distribution;
    its KV cache holds ``draft_tokens + 1`` slots per new token.
    """

    def __init__(
        self, model: PreTrainedModel, pad_token_id: int, eos_token_id: int | None = None,
        max_batch_size: int = 256, version: int = 0, fast: bool = True,
        dtype: torch.dtype | None = None, record_routing: bool = False,
        device: torch.device | str = "cpu", draft: MTPHead | None = None,
        draft_tokens: int = 3,
    ) -> None:
        self.device = torch.device(device)
        self.model = copy.deepcopy(model).eval().to(self.device)
        if dtype is not None:
            self.model.to(dtype)
        if record_routing and not routers(self.model):
            raise ValueError("record_routing needs a mixture-of-experts model; this one has "
                             "no router")
        self.record_routing = record_routing
        self.model.set_attn_implementation("eager")
        for p in self.model.parameters():
            p.requires_grad_(False)
        # built before parameters are listed: LlamaDecoder turns projections into fused views
        fast = fast and LlamaDecoder.supports(self.model)
        self._decoder: Decoder = LlamaDecoder(self.model) if fast else HFDecoder(self.model)
        self.speculative = SpeculativeStats()
        self._drafter = None
        if draft is not None:
            if not isinstance(self._decoder, LlamaDecoder) or record_routing:
                raise ValueError("speculative decoding (an MTP draft) needs a Llama-family "
                                 "model on the fast decoder, without record_routing")
            head = copy.deepcopy(draft).eval().to(self.device,
                                                  self.model.get_output_embeddings().weight.dtype)
            head.requires_grad_(False)
            self._drafter = SpeculativeDecoder(self._decoder, head, draft_tokens,
                                               self.speculative)
        self.pad_token_id, self.eos_token_id = pad_token_id, eos_token_id
        self.max_batch_size, self._version = max_batch_size, version
        self._params = dict(self.model.named_parameters())
        self._received: str | None = None  # checksum of cast weights, as they were sent
        self._freed: FreedStorage | None = None  # while asleep
        self._stale = False  # woken, before every weight was written again

    @property
    def version(self) -> int:
        return self._version

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Copy new weights in place as they come (one at a time: a stream of gathered shards
        is never whole), cast to the engine's dtype; an unknown name or shape raises
        ``KeyError`` or ``ValueError``. A sleeping engine wakes first, and computes again
        once every weight was written. Only a sync that casts is fingerprinted as it comes
        (``weights_checksum`` then reports what was sent): the tensors that came cast as they
        pass, the others from the engine's copy, whose bytes are theirs."""
        if self._freed is not None:
            self._freed.restore()
            self._freed, self._stale = None, True
        written: set[str] = set()
        received, cast = WeightsDigest(), set()  # the digest of what came cast, as it came
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in self._params:
                    raise KeyError(f"engine has no parameter {name!r}")
                target = self._params[name]
                if target.shape != tensor.shape:
                    raise ValueError(f"{name}: shape {tuple(tensor.shape)} != "
                                     f"{tuple(target.shape)}")
                if tensor.dtype != target.dtype:
                    received.add(name, tensor)
                    cast.add(name)
                target.copy_(tensor)
                written.add(name)
        for name in written - cast if cast else ():  # these came as they are held: equal bytes
            received.add(name, self._params[name])
        self._received = received.hexdigest() if cast else None
        self._version = version
        self._stale &= written != set(self._params)

    def sleep(self) -> None:
        """Free the memory of every weight until the next ``update_weights`` (which must
        write them all); ``generate``, ``score`` and the checksum refuse until then."""
        if self._freed is None:
            self._freed = FreedStorage(self._params.values())

    def _check_awake(self) -> None:
        if self._freed is not None or self._stale:
            raise EngineAsleepError(
                "the engine is asleep (engine.sleep): its weights come back with the next "
                "weight sync, which must send every weight" if self._freed is not None else
                "the engine woke from sleep and not every weight was sent since")

    def weights_checksum(self) -> str:
        """Of the weights held; of those last sent when they came in another dtype (then, as
        for vLLM and SGLang, the sync's probes check the numbers)."""
        self._check_awake()
        return self._received or weights_checksum(self._params.items())

    @torch.inference_mode()
    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """Log-prob of every token given the ones before it (0.0 for the first), through the
        model's own forward (not the decoding path), at temperature 1."""
        return self.score_routed(sequences)[0]

    @torch.inference_mode()
    def score_routed(self, sequences: Sequence[Sequence[int]]
                     ) -> tuple[list[list[float]], list[torch.Tensor] | None]:
        """``score``, and with ``record_routing`` each sequence's experts ``[T, L, k]`` (as
        ``generate`` records them: what a replaying trainer is given), else None."""
        if any(len(s) == 0 for s in sequences):
            raise ValueError("every sequence needs at least one token")
        self._check_awake()
        n = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), n), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), n), dtype=torch.long)
        for i, s in enumerate(sequences):
            ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s, dtype=torch.long), 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        with capture(self.model) if self.record_routing else contextlib.nullcontext() as rec:
            logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
            routing = None if rec is None else rec.take().view(*ids.shape, rec.n, -1).cpu()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        scores = [[0.0] + logp[i, : len(s) - 1].tolist() for i, s in enumerate(sequences)]
        return scores, None if routing is None else [routing[i, : len(s)]
                                                      for i, s in enumerate(sequences)]

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[GenerationOutput]:
        return [o for rows, row_seeds in self._batches(prompts, sampling, seeds)
                for o in self._generate_batch(prompts[rows], sampling, row_seeds)]

    def _batches(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                 seeds: Sequence[int] | None):
        """``(rows, their seeds)`` of each batch of at most ``max_batch_size`` prompts."""
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        self._check_awake()
        row_seeds = torch.tensor(resolve_seeds(len(prompts), sampling, seeds), dtype=torch.long,
                                 device=self.device)
        for i in range(0, len(prompts), self.max_batch_size):
            rows = slice(i, i + self.max_batch_size)
            yield rows, row_seeds[rows]

    def _stop_ids(self, sampling: SamplingParams) -> torch.Tensor:
        """The tokens that end a completion: ``sampling``'s and the engine's eos."""
        stops = set(sampling.stop_token_ids)
        if self.eos_token_id is not None:
            stops.add(self.eos_token_id)
        return torch.tensor(sorted(stops), dtype=torch.long, device=self.device)

    def check_quick(self) -> None:
        """``ValueError`` unless this engine can answer quick instructions."""
        if not isinstance(self._decoder, LlamaDecoder) or self._drafter or self.record_routing:
            raise ValueError("quick instructions continue the fast decoder's cache: a "
                             "Llama-family model, without a draft or record_routing")

    @torch.inference_mode()
    def generate_quick(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                       quick: Sequence[int], max_quick_tokens: int = 16,
                       seeds: Sequence[int] | None = None, at: str = "prompt"
                       ) -> list[QuickOutput]:
        """``generate``, and for each prompt (``at="prompt"``) or each prompt and its
        completion (``at="completion"``) the greedy answer to each quick-instruction token of
        ``quick``, continuing its KV cache (``engines.quick``; the fast decoder, without a
        draft or routing)."""
        self.check_quick()
        if not quick:
            raise ValueError("quick: at least one instruction token")
        if at not in QUICK_AT:
            raise ValueError(f"at: one of {', '.join(QUICK_AT)}, got {at!r}")
        outs: list[QuickOutput] = []
        for rows, row_seeds in self._batches(prompts, sampling, seeds):
            parked: list = []
            done = self._generate_batch(prompts[rows], sampling, row_seeds, (at, parked))
            answers = answer(self._decoder, parked, quick, max_quick_tokens,
                             self._stop_ids(sampling))
            if at == "prompt":  # a repeated prompt was asked once, as its first request
                by_prompt = {tuple(done[j].prompt_ids): a for j, a in answers.items()}
                answers = {j: by_prompt[tuple(o.prompt_ids)] for j, o in enumerate(done)}
            outs += [QuickOutput(o, answers[j], at) for j, o in enumerate(done)]
        return outs

    def _generate_batch(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, seeds: torch.Tensor,
        parked: tuple[str, list] | None = None,
    ) -> list[GenerationOutput]:
        distinct: dict[tuple[int, ...], int] = {}
        group = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts])
        uniq = list(distinct)
        p_len = max(len(p) for p in uniq)
        ids = torch.full((len(uniq), p_len), self.pad_token_id, dtype=torch.long)
        valid = torch.zeros((len(uniq), p_len), dtype=torch.bool)
        for i, p in enumerate(uniq):
            ids[i, p_len - len(p) :] = torch.tensor(p, dtype=torch.long)
            valid[i, p_len - len(p) :] = True
        stop_ids = self._stop_ids(sampling)
        ids, valid, group = ids.to(self.device), valid.to(self.device), group.to(self.device)
        if self._drafter is not None:
            return self._decode_speculative(prompts, sampling, seeds, ids, valid, group, stop_ids)
        with capture(self.model) if self.record_routing else contextlib.nullcontext() as rec:
            return self._decode(prompts, sampling, seeds, ids, valid, group, stop_ids, rec,
                                parked)

    def _decode_speculative(self, prompts, sampling, seeds, ids, valid, group, stop_ids
                            ) -> list[GenerationOutput]:
        start = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=self.device)
        out = self._drafter.decode(len(prompts), sampling, seeds, ids, valid, group, start,
                                   stop_ids, self.pad_token_id)
        return [GenerationOutput(prompt_ids=list(p),
                                 token_ids=out.tokens[i, : out.lengths[i]].tolist(),
                                 logprobs=out.logps[i, : out.lengths[i]].tolist(),
                                 finish_reason="stop" if bool(out.stopped[i]) else "length",
                                 version=self._version)
                for i, p in enumerate(prompts)]

    def _decode(self, prompts, sampling, seeds, ids, valid, group, stop_ids, rec, parked=None
                ) -> list[GenerationOutput]:
        """Prefill the distinct prompts ``ids`` (left-padded, ``valid``), then sample token by
        token; with ``rec`` (a routing capture) record every processed token's experts; with
        ``parked`` (``(at, a list)``) park each row's cache there after the prefill
        (``at="prompt"``) or as it finishes (``engines.quick``)."""
        max_new = sampling.max_new_tokens
        decoder = self._decoder
        logits = decoder.prefill(ids, valid, max_new)[group]
        prefill_routing = None if rec is None else rec.take().view(*ids.shape, rec.n, -1)
        at, parked = parked or (None, None)
        if at == "prompt":  # each distinct prompt once, as its first request
            distinct = torch.arange(len(ids), device=self.device)
            first = torch.full_like(distinct, len(prompts)).scatter_reduce(
                0, group, torch.arange(len(prompts), device=self.device), "amin")
            parked.append((first, decoder.park(distinct), None))
            parked = None
        decoder.select(group)
        b = len(prompts)
        on = {"device": self.device}  # the sampling state lives where the logits do
        tokens = torch.full((b, max_new), self.pad_token_id, dtype=torch.long, **on)
        logps = torch.zeros((b, max_new), dtype=torch.float32, **on)
        lengths = torch.full((b,), max_new, dtype=torch.long, **on)
        stopped = torch.zeros(b, dtype=torch.bool, **on)
        active = torch.arange(b, **on)  # request index of each decoder row
        start = torch.tensor([len(p) for p in prompts], dtype=torch.long, **on)  # first new
        new_routing = None if rec is None else torch.full(
            (b, max_new, *prefill_routing.shape[2:]), -1, dtype=torch.long, **on)
        for t in range(max_new):
            tok, lp = sample_tokens(logits, sampling, counter_uniforms(seeds[active],
                                                                       start[active] + t))
            tokens[active, t], logps[active, t] = tok, lp
            hit = torch.isin(tok, stop_ids)
            if parked is not None and (bool(hit.any()) or t + 1 == max_new):
                done = hit if t + 1 < max_new else torch.ones_like(hit)
                parked.append((active[done], decoder.park(done.nonzero().squeeze(-1)),
                               tok[done]))
            if bool(hit.any()):
                lengths[active[hit]], stopped[active[hit]] = t + 1, True
                left = drop_finished(decoder, hit, active, tok)
                if left is None:
                    break
                active, tok = left
            if t + 1 < max_new:
                logits = decoder.step(tok)
                if rec is not None:
                    new_routing[active, t] = rec.take()

        def routing(i: int, p: Sequence[int]):
            if rec is None:
                return None
            prompt = prefill_routing[group[i], ids.shape[1] - len(p):]
            return torch.cat([prompt, new_routing[i, : lengths[i]]]).cpu()

        return [GenerationOutput(prompt_ids=list(p), token_ids=tokens[i, : lengths[i]].tolist(),
                                 logprobs=logps[i, : lengths[i]].tolist(),
                                 finish_reason="stop" if bool(stopped[i]) else "length",
                                 version=self._version, routing=routing(i, p))
                for i, p in enumerate(prompts)]
