"""The GPU check's kit: what `benchmarks/gpu_check.py` needs on the GPU machine beyond that
machine's image (`gpu_image.txt`), carried there as wheels, since nothing can be downloaded
there.

    python benchmarks/gpu_kit.py download        # KIT's wheels (cp312, manylinux) into .whl/
    python benchmarks/gpu_kit.py command         # the one command line to run there
    python benchmarks/gpu_kit.py emulate -- CMD  # CMD with the image's packages and the kit
    python benchmarks/gpu_kit.py emulate --without math-verify -- CMD   # less some wheels

``emulate`` runs a command here as the image would: importing a module of a distribution that
posttrain requires (directly, or through a requirement the image lacks) and that is neither in
the image nor in ``KIT`` fails as if it were not installed. What the image's own packages need
is the image's business (its versions differ from this machine's). A library's optional import
then takes its fallback, as it would there, and a needed one fails the command: the kit is
complete when ``gpu_check.py --device cpu --tiny`` passes under it
(tests/e2e/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
IMAGE_LIST = Path(__file__).with_name("gpu_image.txt")
WHEELS = ROOT / ".whl"
MAX_BYTES = 64 * 2**20  # what a device call carries, the working tree included
# posttrain's needs the image lacks, on the check's import path (found with ``emulate``)
KIT = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "fastapi",
       "starlette",
       "trl", "datasets", "dill", "multiprocess", "uvicorn",  # the check's TRL side by side
       # the CLI's quickstart (``RUN_QUICKSTART``): the arithmetic verifier, tools, serve
       "math-verify", "latex2sympy2-extended", "antlr4-python3-runtime", "openai", "jiter",
       "sniffio", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py",
       "rank-bm25", "opentelemetry-api",
       # the check's Tinker server driven by the SDK (posttrain[tinker])
       "tinker", "distro", "orjson", "pyqwest", "zstandard", "protobuf", "h2", "hpack",
       "hyperframe")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
RUN = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
       "--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1 "
       "&& timeout 170 python3 benchmarks/gpu_check.py --out $OUT/gpu_check.json "
       "> /dev/null 2> $OUT/gpu_check.log; "
       "timeout 300 python3 benchmarks/gpu_recipes.py --out /tmp/recipes "
       "--report $OUT/gpu_recipes.json > /dev/null 2> $OUT/gpu_recipes.log")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image() -> set[str]:
    """The image's distributions, canonical names."""
    lines = IMAGE_LIST.read_text().splitlines()
    return {canonical(n) for n in lines if n.strip() and not n.startswith("#")}


def download(dest: Path = WHEELS) -> list[Path]:
    """The wheel of each ``KIT`` distribution at this machine's version, for CPython 3.12 on
    manylinux x86-64, into ``dest``; fails when they exceed ``MAX_BYTES``."""
    dest.mkdir(exist_ok=True)
    for name in KIT:
        spec = f"{name}=={importlib.metadata.version(name)}"
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", "--python-version", "3.12",
                        "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS),
                        "-d", str(dest), spec], check=True)
    wheels = sorted(dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    if size > MAX_BYTES:
        raise SystemExit(f"the kit is {size / 2**20:.1f} MiB, over the 64 MiB a call carries")
    return wheels


def requirements(names: set[str], stop: set[str], extras: tuple[str, ...] = ("",)) -> set[str]:
    """What the installed distributions ``names`` require with ``extras``, and what those
    require, without descending into ``stop`` (canonical names)."""
    out, todo = set(), list(names)
    while todo:
        try:
            lines = importlib.metadata.requires(todo.pop()) or ()
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in lines:
            req = Requirement(line)
            name = canonical(req.name)
            wanted = req.marker is None or any(req.marker.evaluate({"extra": e})
                                               for e in extras)
            if wanted and name not in stop | out:
                out.add(name)
                todo.append(name)
    return out


def missing() -> set[str]:
    """posttrain's requirements (with the ``tinker`` extra, which the check serves) the image
    lacks, and theirs, as installed here (canonical),
    but those the image's packages need here (whose versions here may need what the image's
    do not): those are the image's business."""
    have = image()
    ours = requirements({"posttrain"}, have, ("", "tinker"))
    direct = {canonical(Requirement(r).name) for r in importlib.metadata.requires("posttrain")}
    return ours - requirements(have, direct)


def hidden_modules(distributions: set[str]) -> dict[str, list[str]]:
    """Top-level module -> its distributions, for the modules whose distributions all lie in
    ``distributions`` (canonical names)."""
    owners = importlib.metadata.packages_distributions()
    return {name: sorted(dists) for name, dists in owners.items()
            if {canonical(d) for d in dists} <= distributions}


# an import of a hidden module fails as if its distributions were absent
BLOCKER = '''\
import importlib.abc, sys
HIDDEN = {hidden!r}


class NotInImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (the GPU image lacks "
                                      f"{{', '.join(HIDDEN[name])}}; add it to gpu_kit.KIT)",
                                      name=name)
        return None


sys.meta_path.insert(0, NotInImage())
'''


def emulate(command: list[str], without: tuple[str, ...] = ()) -> int:
    """Run ``command`` with the distributions posttrain needs and the image lacks hidden, but
    those of ``KIT`` (less ``without``: what a wheel is needed for)."""
    with tempfile.TemporaryDirectory() as site:
        kept = {canonical(n) for n in KIT} - {canonical(n) for n in without}
        hidden = hidden_modules(missing() - kept)
        Path(site, "sitecustomize.py").write_text(BLOCKER.format(hidden=hidden))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [site, str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        return subprocess.run(command, env=env).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("download", "command", "emulate"))
    parser.add_argument("--without", nargs="+", default=[], metavar="DIST",
                        help="emulate: leave these of the kit's wheels out")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    if args.what == "download":
        wheels = download()
        size = sum(w.stat().st_size for w in wheels)
        print(f"{len(wheels)} wheels, {size / 2**20:.1f} MiB in {WHEELS}")
    elif args.what == "command":
        print(RUN)
    else:
        if not command:
            parser.error("emulate needs a command: emulate -- python benchmarks/gpu_check.py")
        raise SystemExit(emulate(command, tuple(args.without)))

if __name__ == "__main__":
    main()
