"""§9 rule verifiers: the spec's examples and their known weaknesses."""

import subprocess
import sys

import pytest

from posttrain.rewards import VERIFIERS, gsm8k_gold, parse_numeric, tau_product


@pytest.mark.parametrize("text,value", [
    ("x = 3.5", 3.5), ("10%", 10.0), (".5", 0.5), ("42.0", 42.0), ("$7", 7.0),
    ("1,000", None), ("The answer is 42.", None), ("5 apples", None), (None, None),
])
def test_parse_numeric_spec_examples(text, value):
    assert parse_numeric(text) == value


def test_strip_commas_option_and_numeric_equivalence():
    assert parse_numeric("1,000", strip_commas=True) == 1000.0
    assert VERIFIERS["numeric_match"]("<answer>42.0</answer>", "42") == 1.0
    assert VERIFIERS["numeric_match"]("<answer>41</answer>", "42") == 0.0


def test_answer_tag_and_exact_match():
    assert VERIFIERS["exact_match"]("<answer>1</answer> <answer> 42 </answer>", "42") == 1.0
    assert VERIFIERS["exact_match"]("<answer>...</answer>", "...") == 0.0  # placeholder
    assert VERIFIERS["exact_match"]("42", "42") == 0.0  # no tag
    assert gsm8k_gold("Natalia sold 48 clips... #### 72") == "72"


def test_gsm8k_combined_spec_examples():
    score = VERIFIERS["gsm8k_combined"]
    assert score("<reasoning>r</reasoning><answer>42</answer>", "42") == pytest.approx(2.8)
    assert score("<answer>42.0</answer>", "42") == pytest.approx(1.9)
    assert score("nothing", "42") == 0.0


def test_dapo_think_lang():
    assert VERIFIERS["dapo_pm1"]("<answer>5</answer>", "5") == 1.0
    assert VERIFIERS["dapo_pm1"]("<answer>6</answer>", "5") == -1.0
    assert VERIFIERS["think_format"]("<think>a</think><answer>1</answer>") == 1.0
    assert VERIFIERS["think_format"]("<answer>1</answer>") == 0.0
    assert VERIFIERS["lang_consistency"]("so 12 plus 7 is 19") == 1.0
    assert VERIFIERS["lang_consistency"]("so 12 plus 7 是 19") == pytest.approx(2 / 3)
    assert VERIFIERS["lang_consistency"]("") == 0.0


def test_math_equiv_is_symbolic_and_never_raises():
    eq = VERIFIERS["math_equiv"]
    assert eq(r"so \boxed{\frac{1}{2}}", "0.5") == 1.0
    assert eq(r"\boxed{2 \cdot \sqrt{2}}", r"\sqrt{8}") == 1.0
    assert eq(r"\boxed{x^2 - 1}", "(x-1)*(x+1)") == 1.0
    assert eq(r"\boxed{3}", "4") == 0.0
    assert eq("no box", "4") == 0.0
    assert eq(r"\boxed{(((}", "4") == 0.0  # unparseable: wrong, not a crash


def test_tau_product():
    assert tau_product({"db": 1.0, "comm": 1.0, "x": 0.0}, ["db", "comm"]) == (1.0, True)
    assert tau_product({"db": 1.0, "comm": 0.0}, ["db", "comm"]) == (0.0, False)


def test_math_reads_latex_plain_boxed_and_gsm8k_answers():
    m = VERIFIERS["math"]
    assert m("<answer>72</answer>", "Natalia sold 48/2 = 24 clips in May.\n#### 72") == 1.0
    assert m(r"The answer is \boxed{\frac{3}{4}}", "0.75") == 1.0
    assert m("<answer>0.75</answer>", r"\frac{3}{4}") == 1.0
    assert m("<answer>5</answer>", "4") == 0.0
    assert m("no answer at all", "4") == 0.0
    assert m("<answer>4</answer>", "") is None  # a reference that does not parse: missing


def test_math_pays_a_numeric_reference_only_for_a_number():
    """math-verify takes "59 + 63" as equal to 122: restating the question paid 1.0 (a real
    instruct model learned to answer "10 + 9 =" in 13 GRPO steps). A number written as one
    (integer, decimal, percentage, fraction, or the result of shown work) still pays."""
    m = VERIFIERS["math"]
    gsm8k = "59 + 63 = 122\n#### 122"
    assert m("The total is 59 + 63.", gsm8k) == 0.0
    assert m("<answer>10 + 9 =</answer>", "19") == 0.0
    assert m("<answer>2 \\cdot 61</answer>", "122") == 0.0
    assert m("59 + 63 = 122", gsm8k) == m("The total is 122.", gsm8k) == 1.0
    assert m("<answer>3/4</answer>", "0.75") == m("<answer>1,234</answer>", "1234") == 1.0
    assert m("<answer>-7</answer>", "-7") == m("<answer>50\\%</answer>", "50") == 1.0
    assert m(r"<answer>\sqrt{3}/2</answer>", r"\frac{\sqrt{3}}{2}") == 1.0  # not a number


def test_a_math_check_that_outlives_its_timeout_is_killed_and_the_next_one_runs():
    from posttrain.rewards.math_verifier import WORKER, MathTimeout

    assert WORKER.check("4", "4") == 1.0
    busy = WORKER._process
    with pytest.raises(MathTimeout):
        WORKER.check(r"(10^{100000})!", r"\sqrt{2}", timeout=0.5)  # sympy works on for minutes
    assert busy.poll() is not None  # killed, not left computing
    assert WORKER.check("4", "4") == 1.0 and WORKER._process is not busy


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    """The worker is a plain child process: it never imports the user's script again (a
    multiprocessing child would, and run a whole training script twice)."""
    script = tmp_path / "train.py"
    script.write_text("from posttrain.rewards import VERIFIERS\n"
                      "print('ran', VERIFIERS['math']('<answer>2</answer>', '2'))\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True, timeout=120)
    assert run.stdout.splitlines() == ["ran 1.0"]
