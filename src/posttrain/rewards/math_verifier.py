"""Math answers checked with ``math-verify``: the ``math`` and ``math_equiv`` verifiers.

``math`` (``math_answer``) compares the completion's answer (its ``<answer>`` tag, else the
whole text, where math-verify finds the last ``\\boxed{}`` or expression) with the reference
(LaTeX or plain; a GSM8K solution's ``#### 72`` reads as 72); a numeric reference needs an
answer written as a number, not an unevaluated expression (``59 + 63``). ``math_equiv``
compares only the last ``\\boxed{}``. Each check runs in a worker process that is killed
when it outlives its timeout, so a pathological expression stops costing time: math-verify's
own timeout uses SIGALRM, which only the main thread has, and rollouts score in other threads.
"""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
import threading

from posttrain.config.family import member
from posttrain.rewards.rule_verifiers import BOXED_RE
from posttrain.rewards.verifiers import extract_answer, gold_text

TIMEOUT_S = 5.0  # one check
FRACTION_RE = re.compile(r"-?\d+\s*/\s*\d+")  # math-verify leaves ``3/4`` unevaluated
STARTUP_S = 120.0  # the worker importing math-verify and sympy


class MathTimeout(TimeoutError):
    """A check outlived its timeout; the worker doing it was killed."""


def written_as_number(found: list) -> bool:
    """Whether a math-verify parse (``[sympy value, extracted text]``) is a number as written:
    an integer, a decimal, a percentage or a fraction of two integers (``3/4``,
    ``\\frac{3}{4}``), not an expression left for the reader to evaluate (``59 + 63``)."""
    return bool(getattr(found[0], "is_Number", False)
                or FRACTION_RE.fullmatch(str(found[-1]).strip().rstrip(".")))


def equivalent(answer: str, reference: str) -> float | None:
    """1.0 if math-verify finds ``answer`` equal to ``reference``, 0.0 if not or if the
    answer does not parse, None if the reference does not parse. A reference that is a number
    is matched only by an answer written as a number (``written_as_number``): math-verify
    takes ``59 + 63`` as equal to 122, so restating the question would pay. Runs in the
    worker."""
    from math_verify import parse, verify

    def parsed(text: str) -> list:
        for candidate in (text, f"${text}$"):  # plain LaTeX parses once delimited
            if found := parse(candidate, parsing_timeout=None):
                return found
        return []

    gold = parsed(gold_text(reference))
    if not gold:
        return None
    guess = parsed(answer)
    if guess and written_as_number(gold) and not written_as_number(guess):
        return 0.0
    return float(bool(guess) and verify(gold, guess, timeout_seconds=None))


def serve() -> None:
    """The worker (``python -m posttrain.rewards.math_verifier``): import math-verify, say so,
    then answer one JSON ``[answer, reference]`` line with one JSON ``[status, value]`` line
    until stdin closes."""
    import logging

    import math_verify  # noqa: F401

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout is disabled": ours
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        answer, reference = json.loads(line)
        try:
            reply = ["ok", equivalent(answer, reference)]
        except Exception as e:  # sympy's errors on odd input: the caller decides
            reply = ["error", f"{type(e).__name__}: {e}"]
        print(json.dumps(reply), flush=True)


class MathWorker:
    """One worker process, started on first use and again after a timeout killed it; calls
    from several threads take turns. It is a plain ``python -m`` child (not a
    ``multiprocessing`` one, which would import the caller's main script again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def _start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "posttrain.rewards.math_verifier"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, bufsize=1)
        if self._reply(STARTUP_S) != "ready":
            self._stop()
            raise RuntimeError("the math-verify worker did not start (is math-verify installed?)")

    def _reply(self, timeout: float):
        """The worker's next line, or None after ``timeout`` seconds or at its end."""
        ready, _, _ = select.select([self._process.stdout], [], [], timeout)
        line = self._process.stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def _stop(self) -> None:
        self._process.kill()
        self._process.wait()
        self._process = None

    def check(self, answer: str, reference: str, timeout: float = TIMEOUT_S) -> float | None:
        """``equivalent(answer, reference)`` in the worker; ``MathTimeout`` after
        ``timeout`` seconds, ``ValueError`` if math-verify failed on the input."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            self._process.stdin.write(json.dumps([answer, reference]) + "\n")
            self._process.stdin.flush()
            reply = self._reply(timeout)
            if reply is None:
                self._stop()
                raise MathTimeout(f"math-verify took over {timeout:g} s")
        status, value = reply
        if status == "error":
            raise ValueError(value)
        return value


WORKER = MathWorker()


@member("verifier", "math", fallible=True)
def math_answer(completion: str, reference: str) -> float | None:
    """1 if the completion's answer (``<answer>`` tag, else the text) equals the reference under
    math-verify; None when the reference itself does not parse. A timeout raises ``MathTimeout``."""
    answer = extract_answer(completion)
    return WORKER.check(completion if answer is None else answer, reference)


@member("verifier", "math_equiv")
def math_equiv(completion: str, reference: str) -> float:
    """1 if the last ``\\boxed{}`` content is equal to the reference under math-verify;
    no box, unparseable input or a timeout scores 0."""
    boxed = BOXED_RE.findall(completion or "")
    if not boxed:
        return 0.0
    try:
        return float(WORKER.check(f"\\boxed{{{boxed[-1]}}}", reference) or 0.0)
    except (MathTimeout, ValueError):
        return 0.0


if __name__ == "__main__":
    serve()
