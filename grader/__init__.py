"""The course's grader: nbgrader's workflow with a sandboxed, per-problem autograder. See grader/README.md."""
