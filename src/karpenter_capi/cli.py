"""Command line entry point (placeholder until the subcommands land)."""


def main() -> int:
    return 0
