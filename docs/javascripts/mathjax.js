// MathJax 3 configuration for the formulas that pymdownx.arithmatex (generic mode) wraps in
// <span class="arithmatex">\(…\)</span> and <div class="arithmatex">\[…\]</div>, and for the $…$ and $$…$$ of the
// notebooks' markdown cells (class jp-RenderedMarkdown, on the pages mkdocs-jupyter makes): only those are typeset.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown"
  }
};

// Typeset again on every page that material's instant navigation loads.
document$.subscribe(() => {
  MathJax.startup.output.clearCache()
  MathJax.typesetClear()
  MathJax.texReset()
  MathJax.typesetPromise()
})
