#!/usr/bin/env python3
"""Validate Sentry event JSON files with Sentry Relay's normalizer (the event schema judge).

Usage: relay-validate.py EVENT.json [EVENT.json ...]

Each file holds one event (e.g. the output of `vaka report convert FILE`). Each is passed through
`sentry_relay.processing.StoreNormalizer(project_id=1).normalize_event(...)`. A file has a problem when
it is not a JSON object, when the normalizer raises, when the result has `errors`, or when the result's
`_meta` records a value Relay had to drop or rewrite (`err` entries such as an invalid address, or an
original `val` such as an unknown platform rewritten to "other"), because such fixes are silent otherwise.

Prints one line per problem (`FILE: PATH: problem`) and `FILE: ok` for clean files.
Exit status: 0 all files are clean; 1 at least one problem; 2 usage error or `sentry_relay` missing
(install it with `pip install sentry-relay==0.10.1`).
"""
import json
import sys


def meta_errors(meta, path=""):
    """Yields (path, problem) for every `err` entry, and every original value Relay replaced (`val`),
    in a Relay `_meta` tree."""
    if not isinstance(meta, dict):
        return
    for key, value in meta.items():
        if key == "" and isinstance(value, dict):
            for err in value.get("err") or []:
                yield (path or ".", err)
            if "val" in value and not value.get("err"):
                yield (path or ".", {"rewritten_from": value["val"]})
        else:
            yield from meta_errors(value, f"{path}.{key}" if path else str(key))


def check(normalizer, filename):
    """Returns a list of problem strings for one event file."""
    try:
        with open(filename, "rb") as handle:
            event = json.loads(handle.read())
    except (OSError, ValueError) as error:
        return [f"cannot read JSON: {error}"]
    if not isinstance(event, dict):
        return ["not a JSON object"]
    try:
        out = normalizer.normalize_event(event)
    except Exception as error:  # the normalizer rejects some inputs by raising
        return [f"normalizer raised: {error}"]
    problems = []
    for err in out.get("errors") or []:
        problems.append(f"error: {json.dumps(err, sort_keys=True)}")
    for path, err in meta_errors(out.get("_meta") or {}):
        problems.append(f"{path}: {json.dumps(err, sort_keys=True)}")
    return problems


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if len(argv) < 2 else sys.stdout)
        return 2 if len(argv) < 2 else 0
    try:
        from sentry_relay.processing import StoreNormalizer
    except ImportError as error:
        print(f"relay-validate: sentry_relay is not importable ({error}); "
              "pip install sentry-relay==0.10.1", file=sys.stderr)
        return 2
    normalizer = StoreNormalizer(project_id=1)
    failed = False
    for filename in argv[1:]:
        problems = check(normalizer, filename)
        if problems:
            failed = True
            for problem in problems:
                print(f"{filename}: {problem}")
        else:
            print(f"{filename}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
