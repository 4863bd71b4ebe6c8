"""The repository is a Claude Code plugin that Claude Code actually loads.

Claude Code reads a plugin's manifest from .claude-plugin/plugin.json, its MCP servers from .mcp.json at the plugin
root, and its skills from skills/<name>/SKILL.md at the plugin root (or the paths in the manifest's "skills" field);
a SKILL.md at the root is not a skill of the plugin. skills/verl-async-dapo/ holds symlinks to the root SKILL.md and
references/ (Claude Code copies a symlink's content into its plugin cache), so the skill has one source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _frontmatter(text: str) -> dict[str, str]:
    match = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert match, "SKILL.md must start with YAML frontmatter"
    return dict(line.split(": ", 1) for line in match.group(1).splitlines() if ": " in line)


def test_manifest_and_servers_where_claude_code_reads_them() -> None:
    manifest = json.loads((REPO / ".claude-plugin" / "plugin.json").read_text("utf-8"))
    assert manifest["name"] == "verl-async-dapo"
    assert "skills" not in manifest  # so the default skills/ directory is scanned
    for misplaced in ("skills", "commands", "agents", ".mcp.json"):
        assert not (REPO / ".claude-plugin" / misplaced).exists(), misplaced  # ignored there
    servers = json.loads((REPO / ".mcp.json").read_text("utf-8"))["mcpServers"]
    # Through scripts/serve.sh: it finds the installed command where install.py put it, PATH or not (issue 28).
    assert servers["verl-async-dapo"]["args"] == ["${CLAUDE_PLUGIN_ROOT}/scripts/serve.sh"]
    assert (REPO / "scripts" / "serve.sh").is_file()
    marketplace = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text("utf-8"))
    assert [p["source"] for p in marketplace["plugins"]] == ["./"]


def test_the_skill_is_loaded_from_skills_name_skill_md() -> None:
    skills = sorted((REPO / "skills").glob("*/SKILL.md"))
    assert [p.parent.name for p in skills] == ["verl-async-dapo"]
    skill = skills[0]
    # Inside the plugin: a symlink is copied into Claude Code's cache; a target outside the plugin would be lost.
    assert skill.resolve().is_relative_to(REPO) and skill.resolve() == (REPO / "SKILL.md").resolve()
    text = skill.read_text("utf-8")
    assert _frontmatter(text)["name"] == skill.parent.name  # the spec: name matches the directory
    links = re.findall(r"\]\(((?:references|docs)/[^)#]+)\)", text)
    assert links, "SKILL.md links its references"
    for link in links:  # every relative link resolves from the skill's own directory
        assert (skill.parent / link).is_file(), link


def test_question_one_offers_ray_and_says_an_image_is_pulled_first() -> None:
    text = (REPO / "SKILL.md").read_text("utf-8")
    question_1 = text.split("### 1. Container", 1)[1].split("### 2. Proxy", 1)[0]
    assert '`select_container {"name": "ray:<name>"}`' in question_1
    assert "docker pull <image>" in question_1 and "never pulls" in question_1
    assert "allow_no_gpus" in question_1
