// agentrl run report: the trajectory browser (a step picker, a list per step, one trajectory shown).
(function () {
  "use strict";
  document.body.classList.add("js");
  var select = document.getElementById("step-select");
  if (!select) return;
  var lists = Array.prototype.slice.call(document.querySelectorAll("ul.tl"));
  var articles = Array.prototype.slice.call(document.querySelectorAll("article.traj"));
  var links = Array.prototype.slice.call(document.querySelectorAll("ul.tl a"));

  function showList(step) {
    lists.forEach(function (ul) { ul.classList.toggle("shown", ul.dataset.step === step); });
    select.value = step;
  }
  function show(id, keepHash) {
    var target = document.getElementById(id);
    if (!target || !target.classList.contains("traj")) return false;
    articles.forEach(function (a) { a.classList.toggle("active", a === target); });
    links.forEach(function (a) { a.classList.toggle("current", a.dataset.target === id); });
    showList(target.dataset.step);
    if (!keepHash) {
      try { history.replaceState(null, "", "#" + id); } catch (e) { /* file:// in some browsers */ }
    }
    return true;
  }
  function step(delta) {
    var i = articles.findIndex(function (a) { return a.classList.contains("active"); });
    var next = articles[Math.min(articles.length - 1, Math.max(0, i + delta))];
    if (next) show(next.id);
  }
  select.addEventListener("change", function () {
    var first = document.querySelector('ul.tl[data-step="' + select.value + '"] a');
    if (first) show(first.dataset.target);
  });
  links.forEach(function (a) {
    a.addEventListener("click", function (ev) { ev.preventDefault(); show(a.dataset.target); });
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.target && /^(INPUT|SELECT|TEXTAREA)$/.test(ev.target.tagName)) return;
    if (ev.key === "j") step(1);
    if (ev.key === "k") step(-1);
  });
  var start = location.hash.slice(1);
  if (!show(start, true) && articles.length) show(articles[0].id, true);
})();
