// A small Markdown renderer that is safe by construction: every character of the
// model's text is HTML-escaped first, then a few constructs are recognized (code
// blocks, inline code, bold, italic, lists, paragraphs). No HTML from the model ever
// reaches the page.

export function escape(s) {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function inline(s) {
  return s
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>");
}

export function renderMarkdown(text) {
  const out = [];
  const parts = text.split(/```/);
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      // A code block; its first line may name the language.
      const body = part.replace(/^[\w+-]*\n/, "");
      out.push(`<pre><code>${escape(body)}</code></pre>`);
      return;
    }
    for (const para of escape(part).split(/\n{2,}/)) {
      if (!para.trim()) continue;
      const lines = para.split("\n");
      if (lines.every((l) => /^\s*([-*]|\d+\.)\s+/.test(l))) {
        const ordered = /^\s*\d+\./.test(lines[0]);
        const items = lines.map((l) => `<li>${inline(l.replace(/^\s*([-*]|\d+\.)\s+/, ""))}</li>`).join("");
        out.push(ordered ? `<ol>${items}</ol>` : `<ul>${items}</ul>`);
      } else {
        out.push(`<p>${lines.map(inline).join("<br>")}</p>`);
      }
    }
  });
  return out.join("");
}
