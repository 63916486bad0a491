"""Confessions (OpenAI 2025, arXiv 2512.08093): after each episode the policy is asked to
confess and its confession is judged, apart from the task's reward.

The confession continues the episode's last segment token for token: the template's scaffold
for a system message holding the confession prompt and the next assistant turn (loss mask 0),
then the sampled confession (mask 1, one more step). Its score is ``rewards["confession"]``,
which the task's total leaves out; the update gives the confession's tokens their own group
advantage (``advantage``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from posttrain.config.sections.reward import CONFESSION_PART
from posttrain.envs import Task
from posttrain.models.chat import render_prompt
from posttrain.rewards import RewardFunction
from posttrain.rollout.scoring import fill_missing
from posttrain.rollout.wrappers.judged import Judge
from posttrain.types import ChatTemplateError, Episode, Segment, StepSpan


@dataclass
class ConfessionRollout:
    """``rollout_fn``'s episodes, each then confessing after ``prompt`` (up to
    ``max_new_tokens`` tokens, sampled as the episode was) and judged by ``judge``."""

    rollout_fn: Callable[..., list[Episode]]
    prompt: str
    max_new_tokens: int
    judge: Judge

    def __call__(self, engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction,
                 sampling, group_size: int = 1, group_prefix: str = "") -> list[Episode]:
        episodes = self.rollout_fn(engine, tokenizer, tasks, reward_fn, sampling, group_size,
                                   group_prefix=group_prefix)
        self.finish_group(engine, tokenizer, episodes, [tasks[j // group_size]
                                                   for j in range(len(episodes))],
                     reward_fn, sampling)
        return episodes

    def finish_group(self, engine, tokenizer, episodes: Sequence[Episode],
                     task_of: Sequence[Task], reward_fn: RewardFunction, sampling) -> None:
        """Have each of ``episodes`` (of ``task_of``) confess on ``engine`` and judge it, in
        place (a synchronous rollout's, or an asynchronous step's group as it is taken)."""
        scaffolds = [self.scaffold(tokenizer, e, t) for e, t in zip(episodes, task_of)]
        confessing = [k for k, s in enumerate(scaffolds) if s is not None]
        outs = engine.generate([episodes[k].segments[-1].token_ids + scaffolds[k]
                                for k in confessing],
                               replace(sampling, max_new_tokens=self.max_new_tokens))
        for k, out in zip(confessing, outs):
            confess(tokenizer, episodes[k], self.prompt, scaffolds[k], out)
        scores = dict(zip(confessing, self.judge([judged_view(episodes[k]) for k in confessing],
                                                 [task_of[k] for k in confessing])))
        for k, episode in enumerate(episodes):
            score = scores.get(k)
            episode.rewards[CONFESSION_PART] = 0.0 if score is None else float(score)
            if score is None:
                episode.meta.setdefault("missing_parts", []).append(CONFESSION_PART)
            if CONFESSION_PART not in episode.meta.setdefault("fallible_parts", []):
                episode.meta["fallible_parts"].append(CONFESSION_PART)
        fill_missing(episodes, reward_fn)  # the task's total leaves the confession out

    def scaffold(self, tokenizer, episode: Episode, task: Task) -> list[int] | None:
        """The template's tokens between the episode's last token and the confession: the
        system message with ``prompt`` and the assistant's generation prompt; None for an
        episode whose last turn is not the policy's (an agent stopped by ``max_turns``, a
        timeout or an error), which does not confess and has its part missing. The
        episode's text is the rendering up to its last turn plus that turn as sampled (as
        the agent loop builds it), so no token is decoded and re-encoded."""
        messages, tools = conversation(tokenizer, episode, task), episode.meta.get("tools")
        if messages[-1]["role"] != "assistant":
            return None
        seg = episode.segments[-1]
        ended = bool(seg.token_ids) and seg.token_ids[-1] == tokenizer.eos_token_id
        text = render_prompt(tokenizer, messages[:-1], True, tools or None) + \
            messages[-1]["content"] + (tokenizer.eos_token if ended else "")
        following = render_prompt(tokenizer, [*messages, self.system()], True, tools or None)
        if not following.startswith(text):
            raise ChatTemplateError("the chat template does not extend the episode with a "
                                    "system message; cannot append the confession")
        return tokenizer.encode(following[len(text):], add_special_tokens=False)

    def system(self) -> dict:
        return {"role": "system", "content": self.prompt}


def conversation(tokenizer, episode: Episode, task: Task) -> list[dict]:
    """The messages of the episode's last segment: the agent loop's record, or a single-turn
    episode's task and its completion as sampled (special tokens kept, the eos dropped)."""
    recorded = episode.meta.get("segment_messages")
    if recorded:
        return list(recorded[-1])
    seg = episode.segments[-1]
    (answer,) = seg.steps
    sampled = tokenizer.decode(seg.token_ids[answer.start:answer.end], skip_special_tokens=False)
    return [*task.messages(),
            {"role": "assistant", "content": sampled.removesuffix(tokenizer.eos_token)}]


def confess(tokenizer, episode: Episode, prompt: str, scaffold: list[int], out) -> None:
    """Append the scaffold (mask 0) and the sampled confession (mask 1, a new step) to the
    episode's last segment; record its text and keep the agent loop's per-step lists and
    conversations in line."""
    seg = episode.segments[-1]
    begin = len(seg.token_ids) + len(scaffold)
    ids = list(out.token_ids)
    episode.segments[-1] = Segment(
        seg.token_ids + scaffold + ids, seg.loss_mask + [0] * len(scaffold) + [1] * len(ids),
        seg.logprobs + [0.0] * len(scaffold) + list(out.logprobs),
        seg.versions + [-1] * len(scaffold) + [out.version] * len(ids),
        [*seg.steps, StepSpan(begin, begin + len(ids))])
    text = tokenizer.decode(ids, skip_special_tokens=False).removesuffix(tokenizer.eos_token)
    episode.meta["confession"] = text
    turns = [{"role": "system", "content": prompt}, {"role": "assistant", "content": text}]
    if episode.meta.get("segment_messages"):
        episode.meta["segment_messages"][-1] = [*episode.meta["segment_messages"][-1], *turns]
        episode.meta["messages"] = [*episode.meta["messages"], *turns]
    for key, value in (("state_keys", CONFESSION_PART), ("step_errors", False)):
        if key in episode.meta:
            episode.meta[key] = [*episode.meta[key], value]


def judged_view(episode: Episode) -> Episode:
    """What the confession's judge reads: the episode, with ``meta["completion"]`` the answer
    followed by the confession (a prompted judge grades that text)."""
    answer = episode.meta.get("completion", episode.meta.get("final", ""))
    return replace(episode, meta={**episode.meta, "completion":
                                  f"{answer}\n\nConfession: {episode.meta['confession']}"})



def confessing(rollout_fn: Callable[..., list[Episode]], cfg, tokenizer
               ) -> Callable[..., list[Episode]]:
    """``rollout_fn`` with ``reward.confession``'s confessions after it (itself when off)."""
    c = cfg.reward.confession
    if c is None:
        return rollout_fn
    return ConfessionRollout(rollout_fn, c.prompt, c.max_new_tokens,
                             c.judge.build(tokenizer, cfg.trainer.compute_dtype, cfg.seed))
