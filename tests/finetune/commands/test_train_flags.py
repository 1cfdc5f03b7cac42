"""finetune/commands/train_flags.py: each flag's help says its default once."""

from __future__ import annotations

import argparse

from core import cli
from finetune.commands.train_flags import add_arguments


def test_each_flag_names_its_default_once():
    parser = argparse.ArgumentParser(formatter_class=cli.DefaultsFormatter)
    add_arguments(parser)
    formatter = cli.DefaultsFormatter("python -m finetune train")
    twice = []
    for action in parser._actions:
        shown = (formatter._get_help_string(action) or "") % {"default": action.default}
        if shown.count("(default") > 1:
            twice.append((action.option_strings[0], shown))
    assert not twice
    share = next(a for a in parser._actions if "--passage-share" in a.option_strings)
    assert "(1 = every row)" in share.help and share.help.endswith("(default: 1)")
