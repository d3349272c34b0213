#!/usr/bin/env python3
"""Checks every line of NDJSON files against docs/schema.json (JSON Schema).

    validate_ndjson.py SCHEMA FILE...

Prints one line per invalid record (file:line: field path: problem) and a
summary; exits 1 when a line is invalid or no line was checked, 2 on usage or
schema errors. Used by the integration tests on real daemon output.
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("validate_ndjson: python3-jsonschema is missing (scripts/setup.sh installs it)", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        print(f"validate_ndjson: {argv[1]} is not a valid JSON Schema: {e.message}", file=sys.stderr)
        return 2
    validator = cls(schema)
    checked = bad = 0
    for path in argv[2:]:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                checked += 1
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    bad += 1
                    print(f"{path}:{n}: not JSON: {e}")
                    continue
                errors = sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path))
                if errors:
                    bad += 1
                for e in errors:
                    where = "/".join(str(p) for p in e.absolute_path) or "(record)"
                    print(f"{path}:{n}: {where}: {e.message}")
    print(f"validate_ndjson: {checked} lines checked, {bad} invalid")
    return 1 if bad or not checked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
