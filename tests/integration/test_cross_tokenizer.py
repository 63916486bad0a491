"""Cross-tokenizer distillation: a teacher with its own tokenizer scores the student's text,
and its log-probs reach the student's tokens span by span. Two real tiny tokenizers (vocab
512 and 1024, trained on the same corpus) split words differently; the spans are worked by
hand, and the chain rule is checked as a claim: a span's teacher log-prob is kept whole."""

import json
import random

import pytest
import torch
from typer.testing import CliRunner

from posttrain.algos import get
from posttrain.cli.app import app
from posttrain.config import ConfigError, OptimConfig, load_config
from posttrain.data import generate_arithmetic_sft
from posttrain.data.conversations import conversation_segment
from posttrain.engines import TorchEngine
from posttrain.envs.arithmetic import ArithmeticTasks
from posttrain.models import build_tiny, encode_prompt, load_model, load_tokenizer
from posttrain.models.tiny import build_tokenizer
from posttrain.recipes.distillation.aligned_targets import (
    AlignedConversations,
    aligned_positions,
    masked_runs,
)
from posttrain.recipes.distillation.offline import run_distill
from posttrain.recipes.distillation.teachers import (
    Samples,
    Teacher,
    model_targets,
    sampled_logprobs,
)
from posttrain.recipes.distillation.token_alignment import (
    aligned_spans,
    spread,
    token_ends,
    turn_end,
)
from posttrain.reporting import Reporter
from posttrain.rewards import RewardFunction
from posttrain.rollout import rollout
from posttrain.train import Trainer
from posttrain.types import Batch, Episode, SamplingParams, Segment, TeacherMismatchError

STUDENT, TEACHER = build_tokenizer(512), build_tokenizer(1024)


def pieces(tok, text):
    return [tok.convert_ids_to_tokens(i) for i in tok.encode(text, add_special_tokens=False)]


def test_the_spans_of_two_real_tokenizers_by_hand():
    """'Please give the final answer': the student splits 'Pl' + 'ease' where the teacher
    has 'Please', so the first span holds two student tokens and one teacher token; the
    rest match one to one. 'café': both split the two bytes of 'é' into two tokens; the
    first ends inside the character, so the two form one span."""
    text = "Please give the final answer"
    assert pieces(STUDENT, text)[:2] == ["Pl", "ease"] and pieces(TEACHER, text)[0] == "Please"
    s_ids = STUDENT.encode(text, add_special_tokens=False)
    t_ids = TEACHER.encode(text, add_special_tokens=False)
    s_ends, t_ends = token_ends(STUDENT, s_ids, text), token_ends(TEACHER, t_ids, text)
    assert s_ends == [2, 6, 11, 15, 21, 28] and t_ends == [6, 11, 15, 21, 28]
    spans = aligned_spans(s_ends, t_ends)
    assert spans == [([0, 1], [0]), ([2], [1]), ([3], [2]), ([4], [3]), ([5], [4])]
    assert spread(spans, [-1.0, -0.5, -0.2, -0.3, -0.4], 6) == [-0.5, -0.5, -0.5, -0.2,
                                                                -0.3, -0.4]
    assert turn_end(STUDENT) == [STUDENT.convert_tokens_to_ids("<|im_end|>")]
    cafe = "café: tens"
    c_ids = STUDENT.encode(cafe, add_special_tokens=False)
    assert token_ends(STUDENT, c_ids, cafe)[3:5] == [None, 4]


def test_spans_close_only_where_both_tokenizations_end():
    """Student 'ab|c|de', teacher 'a|bc|d|e' (ends 2, 3, 5 and 1, 3, 4, 5): spans 'abc' and
    'de'; sums are kept span by span. An untrained student's lone bytes decode to U+FFFD,
    which the teacher encodes as three byte tokens, two of no width."""
    spans = aligned_spans([2, 3, 5], [1, 3, 4, 5])
    assert spans == [([0, 1], [0, 1]), ([2], [2, 3])]
    assert spread(spans, [-1.0, -2.0, -0.5, -0.25], 3) == [-1.5, -1.5, -0.75]
    # tokens of no width (the bytes of one replacement character) stay with their span
    assert aligned_spans([1, 1, 2], [1, 2, 2]) == [([0, 1], [0]), ([2], [1, 2])]
    with pytest.raises(ValueError, match="same text"):
        aligned_spans([2, 3], [1, 4])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("cross")
    return (build_tiny(root / "student", "nano", seed=0),
            build_tiny(root / "teacher", "small", seed=1))


def test_the_teachers_whole_completion_log_prob_reaches_the_students_tokens(models):
    """The chain rule as a claim: summed over a completion's student tokens, the spread
    log-probs equal the teacher's own log-prob of that text (its tokens, its chat template,
    its end of turn), to float32 rounding over a few dozen terms."""
    student_dir, teacher_dir = models
    tok, t_tok = load_tokenizer(student_dir), load_tokenizer(teacher_dir)
    assert tok.get_vocab() != t_tok.get_vocab()
    engine = TorchEngine(load_model(student_dir), tok.pad_token_id, tok.eos_token_id)
    tasks = ArithmeticTasks().sample(3, random.Random(0))
    episodes = rollout(engine, tok, tasks, RewardFunction({"c": ("numeric", 1.0)}),
                       SamplingParams(max_new_tokens=12, temperature=1.0, seed=5,
                                      stop_token_ids=(tok.eos_token_id,)), 2)
    teacher = Teacher("t", model=load_model(teacher_dir), tokenizer=t_tok)
    samples = Samples(episodes, [t for t in tasks for _ in range(2)])
    batch = Batch.from_episodes(episodes, tok.pad_token_id)
    got = sampled_logprobs([teacher], torch.ones(6, 1), samples, batch, tok)
    for row, (episode, task) in enumerate(zip(episodes, samples.tasks)):
        seg = episode.segments[0]
        completion = seg.token_ids[seg.first_sampled:]
        ended = completion[-1] == tok.eos_token_id
        text = tok.decode(completion[:-1] if ended else completion,
                          clean_up_tokenization_spaces=False)
        prompt = encode_prompt(t_tok, task.messages())
        own = t_tok.encode(text, add_special_tokens=False) + (turn_end(t_tok) if ended
                                                              else [])
        whole = sum(teacher.score([prompt + own], t_tok.pad_token_id)[0][len(prompt):])
        assert float(got[row].sum()) == pytest.approx(whole, abs=1e-4 * len(own))


def test_a_teacher_that_cannot_reproduce_the_text_is_named(models):
    student_dir, teacher_dir = models
    tok = load_tokenizer(student_dir)

    class Lossy:  # a tokenizer that drops what it cannot encode
        def __getattr__(self, name):
            return getattr(TEACHER, name)

        def encode(self, text, add_special_tokens=False):
            return TEACHER.encode(text.replace("7", ""), add_special_tokens=False)

    task = ArithmeticTasks().sample(1, random.Random(0))[0]
    ids = tok.encode("<answer>17</answer>", add_special_tokens=False)
    prompt = [1, 2, 3]
    episode = Episode([Segment.from_prompt_completion(prompt, ids, [0.0] * len(ids))])
    teacher = Teacher("lossy", model=load_model(teacher_dir), tokenizer=Lossy())
    with pytest.raises(TeacherMismatchError, match="lossy.*does not reproduce"):
        sampled_logprobs([teacher], torch.ones(1, 1), Samples([episode], [task]),
                         Batch.from_episodes([episode], tok.pad_token_id), tok)


def test_uld_compares_sorted_probabilities_across_vocabularies():
    """P = (.7, .2, .1), Q = (.1, .5, .1, .3): sorted and padded, (.7, .2, .1, 0) against
    (.5, .3, .1, .1): .2 + .1 + 0 + .1 = .4; a relabelled vocabulary changes nothing."""
    uld = get("divergence", "uld")
    p = torch.tensor([[0.7, 0.2, 0.1]], dtype=torch.float64).log()
    q = torch.tensor([[0.1, 0.5, 0.1, 0.3]], dtype=torch.float64).log()
    assert uld(teacher_logp=p, student_logp=q).item() == pytest.approx(0.4, abs=1e-12)
    assert uld(teacher_logp=q[:, [3, 1, 0, 2]], student_logp=q).item() == pytest.approx(0.0)


CONVERSATION = [{"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "Please give the final answer"}]


def test_offline_alignment_pairs_one_to_one_tokens_by_hand():
    """The student's turn is 'Pl|ease| give| the| final| answer|<|im_end|>' at positions
    16-22, the teacher's 'Please| give| the| final| answer|<|im_end|>' at 15-20: 'Please' is
    a two-to-one span (no target); the four words and the end of turn pair up."""
    s, t = conversation_segment(STUDENT, CONVERSATION), conversation_segment(TEACHER,
                                                                             CONVERSATION)
    assert masked_runs(s) == [list(range(16, 23))] and masked_runs(t) == [list(range(15, 21))]
    assert aligned_positions(STUDENT, s, TEACHER, t) == [(18, 16), (19, 17), (20, 18),
                                                         (21, 19), (22, 20)]


def test_aligned_targets_with_one_tokenizer_are_the_plain_targets(models):
    """An equivalence: with the student's own tokenizer every token aligns, and the aligned
    targets are exactly the same-vocabulary ones (same positions, same distributions)."""
    student_dir, _ = models
    tok, model = load_tokenizer(student_dir), load_model(student_dir)
    convs = [CONVERSATION, [{"role": "user", "content": "Add 4 and 5."},
                            {"role": "assistant", "content": "<answer>9</answer>"}]]
    segs = [conversation_segment(tok, c) for c in convs]
    batch = Batch.from_episodes([Episode([s]) for s in segs], tok.pad_token_id)
    [(index, weight, logp)] = AlignedConversations(tok, tok, segs, segs).targets(
        model, [0, 1])(batch)
    [(plain_index, _, plain)] = model_targets(model)(batch)
    assert torch.equal(index, plain_index) and torch.equal(logp, plain)
    assert weight.tolist() == [1.0] * len(index)


def test_offline_distillation_from_a_teacher_with_another_tokenizer(models, tmp_path):
    """uld at the aligned positions: the divergence falls over 20 steps; another divergence
    across tokenizers is refused by name."""
    student_dir, teacher_dir = models
    tok, t_tok = load_tokenizer(student_dir), load_tokenizer(teacher_dir)
    data = generate_arithmetic_sft(ArithmeticTasks(), 64, 0.0, seed=0).conversations
    trainer = Trainer(load_model(student_dir), OptimConfig(lr=3e-3, warmup_steps=0), 20)
    run_distill(trainer, load_model(teacher_dir), tok, t_tok, data, 20, 16,
                Reporter(tmp_path, quiet=True), divergence="uld")
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert rows[-1]["divergence"] < 0.8 * rows[0]["divergence"]
    with pytest.raises(TeacherMismatchError, match="forward_kl.*takes uld"):
        run_distill(trainer, load_model(teacher_dir), tok, t_tok, data, 1, 1, None)
    with pytest.raises(ConfigError, match="ce_weight"):
        load_config(None, ["stages=[distill]", f"distill.teacher={teacher_dir}",
                           "distill.lam=0.5", "distill.ce_weight=1"])


def test_an_opd_run_takes_a_teacher_with_another_tokenizer(models, tmp_path):
    """Through the CLI: a sampled loss runs and logs its reverse-KL estimate; the
    full-vocabulary loss is refused, naming the sampled ones."""
    _, teacher_dir = models
    args = ["train", "configs/quickstart.yaml", "model.preset=nano", "stages=[opd]",
            "threads=1", f"opd.teachers=[{{path: {teacher_dir}}}]", "opd.steps=2",
            "opd.prompts_per_step=2", "opd.group_size=2", "opd.max_new_tokens=8",
            "opd.eval_every=0", "eval.num_problems=2", "eval.max_new_tokens=4"]
    ran = CliRunner().invoke(app, [*args, "opd.loss=opd_sampled", f"out_dir={tmp_path / 'a'}"])
    assert ran.exit_code == 0, ran.output
    rows = [json.loads(line) for line in open(tmp_path / "a" / "metrics.jsonl")]
    assert sum("sampled_rkl" in r for r in rows) == 2
    refused = CliRunner().invoke(app, [*args, f"out_dir={tmp_path / 'b'}"])
    assert refused.exit_code != 0 and "opd_sampled, opd_clip, mopd" in refused.output
