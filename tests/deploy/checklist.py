"""Pass/fail bookkeeping of the deploy checks (validate_manifests.py,
validate_schemas.py): each check that fails is printed and counted."""


class Checklist:
    def __init__(self):
        self.passes = 0
        self.failures = []

    def check(self, cond, what):
        if cond:
            self.passes += 1
        else:
            self.failures.append(what)
            print("FAIL: " + what)
        return cond

    def summary(self, program, prefix=""):
        """Prints the counts; the exit status: 1 when a check failed."""
        print(f"{program}: {prefix}{self.passes} checks passed, {len(self.failures)} failed")
        return 1 if self.failures else 0
