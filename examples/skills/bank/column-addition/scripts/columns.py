"""Print each column of a sum: the digits, the carry in, the digit written and the carry out.
Reads two integers from standard input."""

import sys

a, b = (int(x) for x in sys.stdin.read().split()[:2])
carry, place = 0, 1
while a or b or carry:
    total = a % 10 + b % 10 + carry
    print(f"column {place}: {a % 10} + {b % 10} + carry {carry} = {total}: "
          f"write {total % 10}, carry {total // 10}")
    a, b, carry, place = a // 10, b // 10, total // 10, place * 10
