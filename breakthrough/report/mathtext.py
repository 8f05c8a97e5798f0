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
escaped, never lost. The converter's MathML is rebuilt element by element (`_Sanitizer`): only
MathML elements and presentation attributes pass and every text is escaped, so a problem holding
`$\\text{<script>…}$` or `\\href{javascript:…}` shows that text and runs nothing; tags typed
inside a text-mode argument reach the converter as character references (`_protect_text`), and
the sanitiser keeps the elements well nested, so a typed `</math>` never closes the math. The
results are `markupsafe.Markup`, which the page templates (autoescaped) insert as they are. An
Asymptote figure (`[asy]…[/asy]`, which no browser draws) is folded into a closed <details>
block: there on a click, not raw code in the reader's way.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from html.parser import HTMLParser

from markupsafe import Markup, escape

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


# What may pass of the converter's output: MathML's presentation elements and attributes (no
# href, no style, no event handlers); anything else is shown as escaped text.
MATHML_ELEMENTS = frozenset(
    "math mrow mi mn mo ms mtext mspace msub msup msubsup mfrac msqrt mroot mstyle merror "
    "mpadded mphantom mfenced menclose munder mover munderover mtable mtr mtd mlabeledtr "
    "mmultiscripts mprescripts none semantics annotation".split()
)
MATHML_ATTRIBUTES = frozenset(
    "xmlns display mathvariant mathsize mathcolor mathbackground stretchy fence separator "
    "separators lspace rspace minsize maxsize symmetric movablelimits largeop form accent "
    "accentunder linethickness bevelled columnalign rowalign columnspacing rowspacing "
    "columnlines rowlines columnspan rowspan frame framespacing displaystyle scriptlevel width "
    "height depth voffset notation open close align linebreak".split()
)


class _Sanitizer(HTMLParser):
    """MathML rebuilt from the converter's output with only `MATHML_ELEMENTS` and
    `MATHML_ATTRIBUTES`; other tags (and all text) are escaped text. The elements stay well
    nested: one `math` root, an end tag passes only when it closes the element open last, and
    whatever is still open at the end is closed. The converter copies `\text{…}` verbatim, so a
    problem's `\text{</math>…}` would otherwise close the math early and leave what follows
    outside it (escaped, but no longer math)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.open: list[str] = []  # the MathML elements open now, innermost last

    def _allowed(self, tag: str) -> bool:
        """A MathML element where it may stand: `math` only as the root, the others inside."""
        return tag in MATHML_ELEMENTS and (tag == "math") == (not self.open)

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]], end: str) -> bool:
        if not self._allowed(tag):
            self.out.append(escape(self.get_starttag_text() or ""))
            return False
        kept = "".join(
            f' {k}="{escape(v or "")}"' for k, v in attrs if k.lower() in MATHML_ATTRIBUTES
        )
        self.out.append(f"<{tag}{kept}{end}>")
        return True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._tag(tag, attrs, ""):
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs, " /")

    def handle_endtag(self, tag: str) -> None:
        if self.open and self.open[-1] == tag:
            self.open.pop()
            self.out.append(f"</{tag}>")
        else:  # a stray end tag (text that looks like one): shown, never obeyed
            self.out.append(escape(f"</{tag}>"))

    def handle_data(self, data: str) -> None:
        self.out.append(escape(data))

    def close(self) -> None:
        super().close()
        self.out.extend(f"</{tag}>" for tag in reversed(self.open))
        self.open.clear()


def _sanitize(mathml: str) -> str:
    parser = _Sanitizer()
    parser.feed(mathml)
    parser.close()
    return "".join(parser.out)


# Text-mode commands whose argument the converter copies into <mtext> character for character.
_TEXT_MODE = re.compile(r"\\(?:text(?:rm|bf|it|tt|sf|normal)?|mbox|hbox)\s*\{")


def _protect_text(latex: str) -> str:
    """`latex` with `<` and `>` inside text-mode arguments (`\\text{…}`, `\\mbox{…}` …) written
    as character references, which the converter copies as they are and the sanitiser reads
    back as text: a tag typed there (`\\text{</mtext></mrow></math>}`) never reaches the
    sanitiser as a tag, not even one that would close exactly the elements open at that point."""
    out, pos = [], 0
    for m in _TEXT_MODE.finditer(latex):
        if m.start() < pos:
            continue  # inside an argument already protected
        depth, end = 1, m.end()
        while end < len(latex) and depth:
            depth += {"{": 1, "}": -1}.get(latex[end], 0)
            end += 1
        arg = latex[m.end() : end].replace("<", "&lt;").replace(">", "&gt;")
        out += [latex[pos : m.end()], arg]
        pos = end
    out.append(latex[pos:])
    return "".join(out)


@lru_cache(maxsize=4096)
def latex_to_mathml(latex: str, display: bool = False) -> str | None:
    """MathML for one LaTeX expression (sanitized: `_Sanitizer`), or None when the converter
    refuses it (unbalanced braces, an unknown construct)."""
    from latex2mathml.converter import convert

    try:
        out = convert(_protect_text(latex.strip()), display="block" if display else "inline")
    except Exception:  # the converter raises several types on bad input; text is the fallback
        return None
    return _sanitize(out) if "<math" in out else None


def math_html(text: str | None) -> Markup:
    """Running text (a problem statement) as HTML: every closed math span as MathML, the rest
    escaped; "" for None."""
    if text is None:
        return Markup("")
    text = str(text)
    if _ASY.search(text):  # math around the figures, each figure folded
        parts = _ASY.split(text)  # text, figure source, text, ...
        return Markup("").join(
            math_html(t)
            if i % 2 == 0
            else Markup(
                '<details class="asy"><summary>figure (Asymptote source, not drawn)'
                "</summary><pre>{}</pre></details>"
            ).format(t.strip())
            for i, t in enumerate(parts)
        )
    out: list[str] = []
    pos = 0
    for m in _SPAN.finditer(text):
        display = (
            m.group("dd") is not None or m.group("bd") is not None or m.group("env") is not None
        )
        latex = next(g for g in m.group("dd", "bd", "env", "bi", "di", "dw") if g is not None)
        mathml = latex_to_mathml(latex, display)
        if mathml is None:
            continue  # left as text (escaped below with what surrounds it)
        out.append(escape(text[pos : m.start()]))
        out.append(mathml)
        pos = m.end()
    out.append(escape(text[pos:]))
    return Markup("".join(out))


def answer_html(answer: str | None) -> Markup:
    """An answer (reference or extracted) as HTML: text with math spans as `math_html` does;
    a bare LaTeX answer (`\\frac{14}{3}`) converted whole; plain text escaped."""
    if answer is None:
        return Markup("")
    answer = str(answer)
    if answer.count("{") != answer.count("}"):  # a fragment (a cut-off answer): as text
        return escape(answer)
    if _SPAN.search(answer) or not _LATEX_HINT.search(answer):
        return math_html(answer)
    mathml = latex_to_mathml(answer)
    return Markup(mathml) if mathml is not None else escape(answer)


def has_raw_latex(rendered: str) -> bool:
    """Whether rendered HTML still shows a LaTeX command outside its MathML (what a reader
    would see as raw LaTeX)."""
    visible = re.sub(r"<math\b.*?</math>|<details\b.*?</details>", "", rendered, flags=re.DOTALL)
    return bool(re.search(r"\\[A-Za-z]+", html.unescape(visible)))
