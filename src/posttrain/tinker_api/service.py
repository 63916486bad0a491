"""What each Tinker call does, on the model: training clients (an adapter each), checkpoints,
sampling sessions (the base, or a saved adapter merged into the torch engine's weights, loaded
when a request asks for other weights than the engine holds)."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from posttrain.engines import GenerationOutput
from posttrain.engines.sampling import resolve_seeds
from posttrain.engines.torch_member import TorchEngineConfig
from posttrain.models import load_model, load_tokenizer
from posttrain.tinker_api.adapters import AdapterPool, LoraSpec
from posttrain.tinker_api.checkpoints import CheckpointError, Checkpoints, tinker_path
from posttrain.tinker_api.losses import BadRequest
from posttrain.tinker_api.runs import Runs
from posttrain.tinker_api.scoring import Asked, Scores, score
from posttrain.types import SamplingParams

SNAPSHOT = "snapshot:"  # a sampling session's weights saved without a name (in memory)
REWRITTEN = ""  # what the engine holds was saved over since
SNAPSHOTS_KEPT = 16  # unnamed sampler weights kept in memory, the newest
DEFAULT_MAX_TOKENS = 256  # a sample request's without max_tokens, where the context has room
Sequences = list[tuple[list[int], list[float], bool]]  # tokens, log-probs, stopped
Sampled = tuple[Sequences, Scores]


@dataclass(frozen=True)
class Sampling:
    params: SamplingParams  # its seed the request's (None: drawn)
    stop_texts: tuple[str, ...]


@dataclass(frozen=True)
class SampleRequest:
    session: str
    prompt: list[int]
    num_samples: int
    sampling: Sampling
    asked: Asked


class Service:
    def __init__(self, model_dir: Path, name: str, root: Path, device: str = "cpu") -> None:
        self.model_dir, self.name = Path(model_dir), name
        self.tokenizer = load_tokenizer(model_dir)
        self.pool = AdapterPool(load_model(model_dir).to(device))
        # no EOS of its own: each request's stops say whether EOS ends a sequence
        self.engine = TorchEngineConfig(device=device).build(
            self.model_dir, "float32", self.tokenizer.pad_token_id, None)
        self.positions = self.engine.model.config.max_position_embeddings
        self.checkpoints = Checkpoints(root)
        self.runs = Runs(self.checkpoints, name)
        self.samplers: dict[str, str | None] = {}  # session -> weights (a path; None: base)
        self._snapshots: dict[str, tuple[LoraSpec, dict]] = {}
        self._held: str | None = None  # the weights the engine holds (None: the base)
        self._sampler_slots: dict[tuple, str] = {}
        self._counter = itertools.count(1)

    def check_base(self, base_model: str | None) -> None:
        if base_model not in (None, self.name, str(self.model_dir)):
            raise BadRequest(f"this server serves {self.name!r}, not {base_model!r}")

    # training clients
    def create_model(self, model_id: str, base_model: str, spec: LoraSpec,
                     user_metadata: dict | None = None) -> dict:
        self.check_base(base_model)
        if model_id not in self.pool.slots:  # a resubmitted create makes no second adapter
            self.pool.create(model_id, spec)
            self.runs.record(model_id, spec, user_metadata)
        return {"model_id": model_id, "type": "create_model"}

    def info(self, model_id: str) -> dict:
        slot = self.pool.slot(model_id)
        return {"model_id": model_id, "type": "get_info", "is_lora": True,
                "lora_rank": slot.spec.rank, "model_name": self.name,
                "model_data": {"model_name": self.name,
                               "tokenizer_id": str(self.model_dir.resolve()),
                               "arch": type(self.pool.model).__name__}}

    def save(self, model_id: str, kind: str, name: str, overwrite: bool = True) -> dict:
        optimizer = self.pool.optimizer_state(model_id) if kind == "weights" else None
        path = self.checkpoints.save(tinker_path(model_id, kind, name),
                                     self.pool.slot(model_id).spec,
                                     self.pool.adapter_state(model_id), optimizer, overwrite)
        if self._held == path:
            self._held = REWRITTEN
        return {"path": path}

    def load(self, model_id: str, path: str, optimizer: bool, session_model: bool = False,
             base_model: str | None = None) -> dict:
        """Into ``model_id`` (a new training client when ``session_model``)."""
        spec, adapter, opt_state = self.checkpoints.load(path)
        if session_model:
            self.check_base(base_model)
            if model_id not in self.pool.slots:
                self.pool.create(model_id, spec)
        self.pool.load_adapter_state(model_id, adapter)
        for p in self.pool.slot(model_id).params.values():  # not the loaded state's gradients
            p.grad = None
        # a state saved before any step has none: AdamW starts fresh
        self.pool.load_optimizer_state(model_id, opt_state if optimizer and opt_state else None)
        return {"path": path, "model_id": model_id, "type": "load_weights"}

    def finish(self, session_id: str) -> None:
        """A session's training clients go (their adapters and optimizer states); what they
        saved stays on disk, and samplers of it keep working."""
        for model_id in [m for m in self.pool.slots if m.startswith(f"{session_id}:train:")]:
            self.pool.delete(model_id)

    # sampling
    def sampling_session(self, weights: str | None, base_model: str | None = None) -> str:
        if weights is None:
            self.check_base(base_model)
        elif not self.checkpoints.exists(weights):  # fails now, not at the first sample
            raise CheckpointError(f"no checkpoint at {weights}")
        session = f"sampler-{next(self._counter)}"
        self.samplers[session] = weights
        return session

    def snapshot(self, model_id: str) -> str:
        """The training client's adapter now, kept in memory for a sampling session."""
        key = f"{SNAPSHOT}{next(self._counter)}"
        self._snapshots[key] = (self.pool.slot(model_id).spec, self.pool.adapter_state(model_id))
        if len(self._snapshots) > SNAPSHOTS_KEPT:
            del self._snapshots[next(iter(self._snapshots))]
        session = f"sampler-{next(self._counter)}"
        self.samplers[session] = key
        return session

    def _hold(self, weights: str | None) -> None:
        if weights == self._held:
            return
        self._held = REWRITTEN  # until the update below has written every weight
        if weights is None:
            self.engine.update_weights(self.pool.plain_weights(None), next(self._counter))
        else:
            if weights.startswith(SNAPSHOT) and weights not in self._snapshots:
                raise BadRequest(f"this sampler's weights were dropped: the server keeps "
                                 f"the newest {SNAPSHOTS_KEPT} unnamed ones "
                                 "(save_weights_for_sampler(name) keeps them)")
            spec, adapter = self._snapshots[weights] if weights.startswith(SNAPSHOT) else \
                self.checkpoints.load(weights)[:2]
            key = (spec.rank, tuple(spec.targets()))
            if key not in self._sampler_slots:
                self._sampler_slots[key] = f"sampler-slot-{len(self._sampler_slots)}"
                self.pool.create(self._sampler_slots[key], spec)
            self.pool.load_adapter_state(self._sampler_slots[key], adapter)
            self.engine.update_weights(self.pool.plain_weights(self._sampler_slots[key]),
                                       next(self._counter))
        self._held = weights

    def sampling(self, prompt_length: int, params: dict) -> Sampling:
        """A request's ``sampling_params``, checked (``BadRequest``, ``ValueError``): its
        prompt and ``max_tokens`` must fit the model's positions (``check_context``); without
        ``max_tokens``, ``DEFAULT_MAX_TOKENS`` or what room is left."""
        room = self.positions + 1 - prompt_length
        asked = params.get("max_tokens")
        self.check_context(prompt_length, 1 if asked is None else int(asked))
        stop_ids, stop_texts = self._stops(params.get("stop"))
        return Sampling(SamplingParams(
            max_new_tokens=min(DEFAULT_MAX_TOKENS, room) if asked is None else int(asked),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)), top_k=max(int(params.get("top_k", -1)), 0),
            stop_token_ids=stop_ids, seed=params.get("seed")), stop_texts)

    def check_context(self, prompt_length: int, max_tokens: int) -> None:
        """``BadRequest`` unless the model reads at most ``max_position_embeddings`` tokens:
        the prompt and every sampled token but the last (as a sampled sequence's datum for
        ``forward_backward`` holds all its tokens but the last)."""
        if not prompt_length:
            raise BadRequest("the prompt is empty")
        if prompt_length + max_tokens - 1 > self.positions:
            raise BadRequest(f"the prompt's {prompt_length} tokens and max_tokens="
                             f"{max_tokens} exceed the model's context: it reads "
                             f"{prompt_length + max_tokens - 1} tokens of at most "
                             f"{self.positions} (max_position_embeddings)")

    def sample_all(self, requests: Sequence[SampleRequest]) -> list[Sampled | Exception]:
        """Each request's sequences and scores, or the exception that failed it. Requests for
        the same weights that sample alike (all but the seed) share one engine call, each row
        drawn from its own request's seeds: the engine's draws are counter-based, so a row's
        completion is the one it gets sampled alone."""
        outcomes: list[Sampled | Exception] = [KeyError(f"no sampling session {r.session!r}")
                                               for r in requests]
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            if r.session in self.samplers:
                groups[self.samplers[r.session],
                       dataclasses.replace(r.sampling.params, seed=None)].append(i)
        for (weights, params), members in groups.items():
            try:
                answers = self._sample_alike(weights, params, [requests[i] for i in members])
            except Exception as exc:  # noqa: BLE001 - each request of the group gets it
                answers = [exc] * len(members)
            for i, answer in zip(members, answers):
                outcomes[i] = answer
        return outcomes

    def _sample_alike(self, weights: str | None, params: SamplingParams,
                      requests: Sequence[SampleRequest]) -> list[Sampled]:
        """Requests that sample alike (``params``, but each its own seed) in one engine call
        with ``weights``."""
        self._hold(weights)
        seeds = [s for r in requests
                 for s in resolve_seeds(r.num_samples, r.sampling.params, None)]
        outs = iter(self.engine.generate([r.prompt for r in requests
                                          for _ in range(r.num_samples)], params, seeds))
        return [self._finish(r, list(itertools.islice(outs, r.num_samples))) for r in requests]

    def _finish(self, request: SampleRequest, outs: list[GenerationOutput]) -> Sampled:
        """A request's sequences, cut at its stop strings, and what it asked scored."""
        sequences = [self._cut(o.token_ids, o.logprobs, o.finish_reason == "stop",
                               request.sampling.stop_texts) for o in outs]
        return sequences, score(self.engine.model, request.prompt,
                                [tokens for tokens, _, _ in sequences], request.asked)

    def _cut(self, tokens: list[int], logprobs: list[float], stopped: bool,
             stop_texts: Sequence[str]) -> tuple[list[int], list[float], bool]:
        """The sequence up to the first token whose text completes a stop string (kept): what
        an engine stopping there would have sampled, since each row's draws depend only on
        its own tokens (counter-based sampling)."""
        def stops(k: int) -> bool:
            text = self.tokenizer.decode(tokens[:k])
            return any(t in text for t in stop_texts)
        if not stop_texts or not stops(len(tokens)):
            return tokens, logprobs, stopped
        lo, hi = 1, len(tokens)  # the least k whose prefix holds a stop string
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if stops(mid) else (mid + 1, hi)
        return tokens[:lo], logprobs[:lo], True

    def _stops(self, stop) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """Token ids (EOS among them, unless ``stop`` is an empty list: the SDK's
        ``SamplingParams`` says ``[]`` disables every stop, EOS included), and strings."""
        eos = self.tokenizer.eos_token_id
        stops = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
        ids = tuple(s for s in stops if isinstance(s, int))
        if eos is not None and stop != []:
            ids += (eos,)
        return ids, tuple(s for s in stops if isinstance(s, str) and s)
