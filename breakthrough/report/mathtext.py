"""Math in the report pages, rendered offline: the LaTeX of problem statements and answers
becomes MathML, which browsers draw natively (Chromium, Firefox, Safari), so a page needs no
script, no font download and no network.

Why MathML via `latex2mathml` rather than KaTeX or MathJax: the pages are static HTML with no
scripts (`report.html`); `latex2mathml` is a small pure-Python converter (MIT), so the math is
converted once when the page is written, and a reader's browser needs nothing else.

What is converted: closed spans `$…$`, `$$…$$`, `\\(…\\)`, `\\[…\\]` and bare environments
(`\\begin{align*}…\\end{align*}`, as MATH problems write them) in running text, and a whole
answer that is bare LaTeX (`\\frac{1}{2}`, `x^2`). What is left as text: an unclosed span (a
problem cut short, an answer cut off by the token budget), a `$` that reads as money ("$5 and
$10": pandoc's rule, no space inside the delimiters and no digit right after the closing one,
unless the span holds a LaTeX command), and anything the converter refuses; such text is shown
escaped, never lost. An Asymptote figure (`[asy]…[/asy]`, which no browser draws) is folded
into a closed <details> block: there on a click, not raw code in the reader's way.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache

# One math span: display ($$…$$, \[…\], a bare \begin{env}…\end{env}) before inline ($…$,
# \(…\)). The inline $ rule is pandoc's (no space after the opening or before the closing $,
# no digit right after it), relaxed for a span that holds a LaTeX command ("$ \sqrt{x} $").
_SPAN = re.compile(
    r"\$\$(?P<dd>.+?)\$\$"
    r"|\\\[(?P<bd>.+?)\\\]"
    r"|(?P<env>\\begin\{(?P<name>[A-Za-z]+\*?)\}.+?\\end\{(?P=name)\})"
    r"|\\\((?P<bi>.+?)\\\)"
    r"|(?<![\\$])\$(?P<di>[^\s$](?:[^$]*?[^\s\\$])?)\$(?!\d)"
    r"|(?<![\\$])\$(?P<dw>[^$]*?\\[A-Za-z][^$]*?)\$",  # spaced, but holds a command
    re.DOTALL,
)
_ASY = re.compile(r"\[asy\](.*?)\[/asy\]", re.DOTALL)
_LATEX_HINT = re.compile(r"\\[A-Za-z]+|[\^_{}]")  # a bare answer that is LaTeX


@lru_cache(maxsize=4096)
def latex_to_mathml(latex: str, display: bool = False) -> str | None:
    """MathML for one LaTeX expression, or None when the converter refuses it (unbalanced
    braces, an unknown construct)."""
    from latex2mathml.converter import convert

    try:
        out = convert(latex.strip(), display="block" if display else "inline")
    except Exception:  # the converter raises several types on bad input; text is the fallback
        return None
    return out if "<math" in out else None


def math_html(text: str | None) -> str:
    """Running text (a problem statement) as HTML: every closed math span as MathML, the rest
    escaped; "" for None."""
    if text is None:
        return ""
    text = str(text)
    if _ASY.search(text):  # math around the figures, each figure folded
        parts = _ASY.split(text)  # text, figure source, text, ...
        return "".join(
            math_html(t)
            if i % 2 == 0
            else "<details class='asy'><summary>figure (Asymptote source, not drawn)"
            f"</summary><pre>{html.escape(t.strip())}</pre></details>"
            for i, t in enumerate(parts)
        )
    out, pos = [], 0
    for m in _SPAN.finditer(text):
        display = (
            m.group("dd") is not None or m.group("bd") is not None or m.group("env") is not None
        )
        latex = next(g for g in m.group("dd", "bd", "env", "bi", "di", "dw") if g is not None)
        mathml = latex_to_mathml(latex, display)
        if mathml is None:
            continue  # left as text (escaped below with what surrounds it)
        out.append(html.escape(text[pos : m.start()]))
        out.append(mathml)
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def answer_html(answer: str | None) -> str:
    """An answer (reference or extracted) as HTML: text with math spans as `math_html` does;
    a bare LaTeX answer (`\\frac{14}{3}`) converted whole; plain text escaped."""
    if answer is None:
        return ""
    answer = str(answer)
    if answer.count("{") != answer.count("}"):  # a fragment (a cut-off answer): as text
        return html.escape(answer)
    if _SPAN.search(answer) or not _LATEX_HINT.search(answer):
        return math_html(answer)
    mathml = latex_to_mathml(answer)
    return mathml if mathml is not None else html.escape(answer)


def has_raw_latex(rendered: str) -> bool:
    """Whether rendered HTML still shows a LaTeX command outside its MathML (what a reader
    would see as raw LaTeX)."""
    visible = re.sub(r"<math\b.*?</math>|<details\b.*?</details>", "", rendered, flags=re.DOTALL)
    return bool(re.search(r"\\[A-Za-z]+", html.unescape(visible)))
