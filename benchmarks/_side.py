"""``python -m benchmarks._side MODULE FUNCTION JSON_KWARGS``: one side of one repetition.

The runner of :func:`benchmarks._harness.fresh`: it imports ``MODULE`` (a module of
``benchmarks``; the package's ``__init__`` imports nothing else, so the process holds only what
the side needs), calls ``FUNCTION(**kwargs)`` and prints the JSON of what it returned as the
last line of stdout. The garbage collector keeps CPython's defaults; it is run once, after the
imports and before the call (the side times only its own measured part).
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    module_name, function_name, arguments = argv
    if module_name != "benchmarks" and not module_name.startswith("benchmarks."):
        print(f"not a module of benchmarks: {module_name!r}", file=sys.stderr)
        return 2
    function = getattr(importlib.import_module(module_name), function_name)
    kwargs = json.loads(arguments)
    if not isinstance(kwargs, dict):
        print(f"the arguments must be a JSON object, not {arguments!r}", file=sys.stderr)
        return 2
    gc.collect()
    result = function(**kwargs)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
