// Short inline code (a flag, an extra such as '.[minatar]', a file name) stays on one
// line: the browser would otherwise break it at its punctuation. Longer code (a test's
// node id) still wraps, so that it never runs out of the text column.
document.querySelectorAll(".md-typeset :not(pre) > code").forEach(function (code) {
  if (code.textContent.length <= 40) {
    code.classList.add("whole");
  }
});
