"""docs/api/ holds one reference page per public module, as its docstrings say today."""

from __future__ import annotations

import re

import pytest

from helpers.api_reference import FOLDER, MODULES, page_path, render


@pytest.mark.parametrize("module", MODULES)
def test_the_committed_page_is_what_the_docstrings_render(module: str) -> None:
    framework = {"lightning": "pytorch_lightning", "ignite": "ignite", "accelerate": "accelerate"}
    pytest.importorskip(framework.get(module.rsplit(".", 1)[-1], "torch"))
    assert page_path(module).read_text(encoding="utf-8") == render(module), (
        f"{page_path(module).name} is out of date: run `make api-docs`"
    )


def test_no_page_documents_a_private_name() -> None:
    headings = [line for page in FOLDER.glob("*.md") for line in page.read_text(encoding="utf-8").splitlines()]
    private = [h for h in headings if re.match(r"#+ (class )?`(\w+\.)*_\w", h)]
    assert not private


def test_every_page_belongs_to_a_public_module() -> None:
    assert sorted(FOLDER.glob("*.md")) == sorted(page_path(m) for m in MODULES)
