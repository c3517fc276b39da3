"""The command line (`python -m engine ...`): the doors' layer, above the core, the topics and the benchmarks.

commands/main.py builds one parser from the core's commands (run, compare, serve, kv-size) and each topic's own
(`add_parser(sub)` in topics/*/cli.py and benchmarks/cli.py), imported by name like any other module.
"""
