import torch

D = torch.float64


def t(values, dtype=D):
    return torch.tensor(values, dtype=dtype)


def one_group(n):
    return torch.zeros(n, dtype=torch.long)


def ones(b, width=1):
    return torch.ones(b, width, dtype=D)
