"""Language ids -> tree-sitter grammars and the few per-language facts the context needs.

Grammars come from the official per-language wheels (offline, pinned in pyproject.toml); any other
language that `tree-sitter-language-pack` can load (it fetches grammars over the network on first
use) works too, and everything else is plain text."""

from __future__ import annotations

import importlib
import logging
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LanguageInfo:
    name: str  # canonical id, e.g. "python", "tsx"
    grammar: tuple[str, str] | None  # (module, function returning the language pointer)
    line_comment: str = "//"
    indent_blocks: bool = False  # blocks are delimited by indentation (Python)
    # Keywords that open a block whose end is a keyword (`end`, `fi`, ...), for block-mode detection.
    block_openers: tuple[str, ...] = ()
    block_closers: tuple[str, ...] = ()
    # Node types that are whole "statements" for cutting windows at syntax boundaries.
    scope_types: frozenset[str] = field(default_factory=frozenset)


_C_SCOPES = frozenset({"function_definition", "struct_specifier", "enum_specifier", "union_specifier"})
_JS_SCOPES = frozenset(
    {
        "function_declaration",
        "function_expression",
        "generator_function_declaration",
        "arrow_function",
        "class_declaration",
        "class",
        "method_definition",
        "interface_declaration",
        "enum_declaration",
        "module",
        "internal_module",
        "abstract_class_declaration",
    }
)

LANGUAGES: dict[str, LanguageInfo] = {
    info.name: info
    for info in (
        LanguageInfo(
            "python",
            ("tree_sitter_python", "language"),
            line_comment="#",
            indent_blocks=True,
            scope_types=frozenset({"function_definition", "class_definition", "decorated_definition"}),
        ),
        LanguageInfo("javascript", ("tree_sitter_javascript", "language"), scope_types=_JS_SCOPES),
        LanguageInfo("typescript", ("tree_sitter_typescript", "language_typescript"), scope_types=_JS_SCOPES),
        LanguageInfo("tsx", ("tree_sitter_typescript", "language_tsx"), scope_types=_JS_SCOPES),
        LanguageInfo(
            "go",
            ("tree_sitter_go", "language"),
            scope_types=frozenset(
                {"function_declaration", "method_declaration", "type_declaration", "func_literal"}
            ),
        ),
        LanguageInfo(
            "rust",
            ("tree_sitter_rust", "language"),
            scope_types=frozenset(
                {
                    "function_item",
                    "impl_item",
                    "trait_item",
                    "struct_item",
                    "enum_item",
                    "mod_item",
                    "closure_expression",
                }
            ),
        ),
        LanguageInfo(
            "java",
            ("tree_sitter_java", "language"),
            scope_types=frozenset(
                {
                    "class_declaration",
                    "interface_declaration",
                    "enum_declaration",
                    "record_declaration",
                    "method_declaration",
                    "constructor_declaration",
                    "lambda_expression",
                }
            ),
        ),
        LanguageInfo("c", ("tree_sitter_c", "language"), scope_types=_C_SCOPES),
        LanguageInfo(
            "cpp",
            ("tree_sitter_cpp", "language"),
            scope_types=_C_SCOPES | {"class_specifier", "namespace_definition", "lambda_expression"},
        ),
        LanguageInfo(
            "ruby",
            ("tree_sitter_ruby", "language"),
            line_comment="#",
            block_openers=(
                "def",
                "class",
                "module",
                "do",
                "if",
                "unless",
                "while",
                "until",
                "case",
                "begin",
                "for",
            ),
            block_closers=("end",),
            scope_types=frozenset({"method", "singleton_method", "class", "module", "do_block", "block"}),
        ),
        LanguageInfo(
            "lua",
            ("tree_sitter_lua", "language"),
            line_comment="--",
            block_openers=("function", "do", "then", "repeat"),
            block_closers=("end", "until"),
            scope_types=frozenset({"function_declaration", "function_definition"}),
        ),
        LanguageInfo(
            "bash",
            ("tree_sitter_bash", "language"),
            line_comment="#",
            block_openers=("then", "do", "else", "in"),
            block_closers=("fi", "done", "esac"),
            scope_types=frozenset({"function_definition"}),
        ),
    )
}

# LSP language ids and common aliases -> canonical name.
ALIASES: dict[str, str] = {
    "py": "python",
    "python3": "python",
    "js": "javascript",
    "javascriptreact": "javascript",
    "jsx": "javascript",
    "ts": "typescript",
    "typescriptreact": "tsx",
    "golang": "go",
    "rs": "rust",
    "h": "c",
    "c++": "cpp",
    "cuda": "cpp",
    "rb": "ruby",
    "sh": "bash",
    "shell": "bash",
    "shellscript": "bash",
    "zsh": "bash",
}

EXTENSIONS: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".pyw": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascriptreact",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "typescriptreact",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
    ".rb": "ruby",
    ".lua": "lua",
    ".sh": "shellscript",
    ".bash": "shellscript",
    ".zsh": "shellscript",
}

PLAIN = LanguageInfo("plaintext", None, line_comment="#")

# Top-level node types kept in the prompt header even when far above the cursor (imports and the like).
IMPORT_TYPES: dict[str, frozenset[str]] = {
    "python": frozenset({"import_statement", "import_from_statement", "future_import_statement"}),
    "javascript": frozenset({"import_statement"}),
    "typescript": frozenset({"import_statement"}),
    "tsx": frozenset({"import_statement"}),
    "go": frozenset({"package_clause", "import_declaration"}),
    "rust": frozenset({"use_declaration", "extern_crate_declaration"}),
    "java": frozenset({"package_declaration", "import_declaration"}),
    "c": frozenset({"preproc_include"}),
    "cpp": frozenset({"preproc_include", "using_declaration", "alias_declaration"}),
}
# Languages whose imports are ordinary calls: top-level lines matching these patterns.
IMPORT_LINE_PATTERNS: dict[str, re.Pattern[str]] = {
    "ruby": re.compile(r"^(require|require_relative|load)\b"),
    "lua": re.compile(r"\brequire\s*[(\"']"),
    "bash": re.compile(r"^(source|\.)\s"),
}


def canonical_name(language_id: str) -> str:
    lowered = (language_id or "").strip().lower()
    return ALIASES.get(lowered, lowered)


def language_id_for_path(path: str) -> str:
    """The LSP language id for a file name ("plaintext" when unknown)."""
    return EXTENSIONS.get(os.path.splitext(path)[1].lower(), "plaintext")


def language_info(language_id: str) -> LanguageInfo:
    name = canonical_name(language_id)
    if name in LANGUAGES:
        return LANGUAGES[name]
    if _pack_language(name) is not None:
        return LanguageInfo(name, ("tree_sitter_language_pack", name))
    return PLAIN


@lru_cache(maxsize=64)
def _pack_language(name: str) -> tree_sitter.Language | None:
    """A grammar from tree-sitter-language-pack, only if it is already downloaded (never blocks on network)."""
    if not name or name == "plaintext":
        return None
    try:
        import tree_sitter_language_pack as pack

        if name not in pack.downloaded_languages():
            return None
        return pack.get_language(name)
    except Exception as exc:  # the pack raises its own error types for unknown or missing grammars
        log.debug("tree-sitter-language-pack has no %s: %s", name, exc)
        return None


@lru_cache(maxsize=64)
def ts_language(language_id: str) -> tree_sitter.Language | None:
    """The tree-sitter Language for a language id, or None (plain text)."""
    info = language_info(language_id)
    if info.grammar is None:
        return None
    module_name, function = info.grammar
    if module_name == "tree_sitter_language_pack":
        return _pack_language(info.name)
    try:
        return tree_sitter.Language(getattr(importlib.import_module(module_name), function)())
    except (ImportError, AttributeError, ValueError) as exc:
        log.warning(
            "grammar %s unavailable (%s); falling back to tree-sitter-language-pack", module_name, exc
        )
        return _pack_language(info.name)


def new_parser(language_id: str) -> tree_sitter.Parser | None:
    language = ts_language(language_id)
    return tree_sitter.Parser(language) if language is not None else None
