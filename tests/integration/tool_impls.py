"""Tools named by ``agent.tools`` in the per-row tools tests."""


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


def mul(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: First.
        b: Second.
    """
    return a * b
