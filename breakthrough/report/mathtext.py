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
escaped, never lost. The converter's MathML is rebuilt from its element tree (`_sanitize`),
never from its string: only MathML elements and presentation attributes pass and every text is
escaped, so a problem holding `$\\text{<script>…}$` or `\\href{javascript:…}` shows that text
and runs nothing, and a typed `</math>` (in `\\text`, `\\emph`, `\\tag`, any argument the
converter copies) is text inside the math, never an end tag that closes it. The results are
`markupsafe.Markup`, which the page templates (autoescaped) insert as they are. An Asymptote
figure (`[asy]…[/asy]`, which no browser draws) is folded into a closed <details> block: there
on a click, not raw code in the reader's way.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from xml.etree.ElementTree import Element

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


def _sanitize(math: Element) -> str:
    """The converter's MathML tree written out again with only `MATHML_ELEMENTS` (`math` only
    as the root) and `MATHML_ATTRIBUTES`, every text and attribute value escaped.

    Why from the tree and not from the converter's string: `latex2mathml` writes its string by
    un-escaping the serialised tree (so that its own character references such as `&#x0222B;`
    survive), which turns the text of `\\text{…}`, `\\emph{…}`, `\\tag{…}` and the like back
    into raw markup; a typed `</mtext></mrow></math>` there then reads as the end tags that close
    the math, whatever list of text commands a pre-pass knew. In the tree that text is still one
    string inside its element, so no text of the problem can become a tag here: tags come only
    from the tree's elements, text only from their text, and an element that is not MathML is
    left out with its content kept as text."""
    return _element(math, root=True)


def _element(node: Element, root: bool = False) -> str:
    inner = _text(node.text) + "".join(_element(child) + _text(child.tail) for child in node)
    tag = str(node.tag)
    if tag not in MATHML_ELEMENTS or (tag == "math") != root:
        return inner
    kept = "".join(
        f' {k}="{escape(html.unescape(str(v)))}"'
        for k, v in node.attrib.items()
        if str(k).lower() in MATHML_ATTRIBUTES
    )
    return f"<{tag}{kept}>{inner}</{tag}>"


def _text(text: str | None) -> str:
    """A text of the tree as HTML: the converter's character references (`&#x0222B;`) read as
    the characters they name, then everything escaped."""
    return str(escape(html.unescape(text))) if text else ""


@lru_cache(maxsize=4096)
def latex_to_mathml(latex: str, display: bool = False) -> str | None:
    """MathML for one LaTeX expression (rebuilt from the converter's tree: `_sanitize`), or None
    when the converter refuses it (unbalanced braces, an unknown construct)."""
    from latex2mathml.converter import convert_to_element

    try:
        math = convert_to_element(latex.strip(), display="block" if display else "inline")
    except Exception:  # the converter raises several types on bad input; text is the fallback
        return None
    return _sanitize(math) if math.tag == "math" else None


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
