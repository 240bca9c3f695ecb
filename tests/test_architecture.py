"""Guards for the architecture: acyclic layers and the exported public API."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("orchestrator.tool", "orchestrator.util", "orchestrator._wire", "orchestrator.log", "orchestrator._ids")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("workers"), ids=lambda p: str(p.relative_to(ROOT)))
def test_workers_import_only_the_shared_layer(path: Path) -> None:
    bad = {m for m in _imports(path) if m.startswith("orchestrator") and not m.startswith(SHARED)}
    assert not bad, f"{path.relative_to(ROOT)} imports the orchestrator's thinking layer: {sorted(bad)}"


@pytest.mark.parametrize("package", ["orchestrator.tool", "orchestrator.util", "orchestrator.log"])
def test_shared_layer_never_imports_workers_at_module_level(package: str) -> None:
    for path in _modules(package):
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level only: the lazy re-export of sandbox tools is in a function
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.startswith("workers") for n in names), path


PUBLIC = {
    "orchestrator.tool": ["tool", "Tool", "ToolDef", "ToolInfo", "ToolParams", "ToolCall", "ToolCallError", "ToolError",
                          "ToolResult", "ToolChoice", "ToolFunction", "bash", "python", "text_editor", "bash_session"],
    "orchestrator.model": ["ChatMessageSystem", "ChatMessageUser", "ChatMessageAssistant", "ChatMessageTool",
                           "ModelOutput", "GenerateConfig", "execute_tools", "ExecuteToolsResult"],
    "orchestrator.approval": ["Approval", "Approver", "approver", "ApprovalPolicy", "auto_approver", "human_approver"],
    "orchestrator.review": ["Review", "Reviewer", "reviewer", "ReviewPolicy"],
    "orchestrator.util": ["sandbox", "SandboxEnvironment", "ExecResult"],
    "orchestrator.dispatch": ["Dispatcher", "InProcessDispatcher"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_api_is_exported(module: str) -> None:
    mod = importlib.import_module(module)
    for name in PUBLIC[module]:
        assert name in mod.__all__, f"{module}.{name} missing from __all__"
        assert getattr(mod, name) is not None


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_everything_in_all_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        getattr(mod, name)


def test_tool_message_fields() -> None:
    from orchestrator.model import ChatMessageTool
    from orchestrator.tool import ToolCallError

    msg = ChatMessageTool(content="out", tool_call_id="c1", function="bash", error=ToolCallError(type="timeout", message="m"))
    assert (msg.text, msg.tool_call_id, msg.function, msg.error.type) == ("out", "c1", "bash", "timeout")
