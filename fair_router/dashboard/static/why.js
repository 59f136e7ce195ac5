// fair-router dashboard: the why panel. "?job=ID" (the search box) or "?tenant=ID" (a tenant row's "why" link)
// asks api/why/job or api/why/tenant (read-only) and draws the answer; redrawn every data-refresh seconds.
// Everything from the answer is escaped (tenant ids and job ids are user input: docs/hostile-input.md).
(function () {
  "use strict";
  var body = document.body;
  var api = body.getAttribute("data-why");
  var refreshMs = Math.max(500, parseFloat(body.getAttribute("data-refresh")) * 1000);
  var panel = document.getElementById("why");
  var form = document.getElementById("why-form");
  var input = document.getElementById("why-job");
  var current = null, timer = null, asked = 0;
  var SAYS = {
    running: "a worker runs it", next: "it is next in serving order: it waits only for a free worker",
    behind: "jobs are served before it", concurrency_limit: "its tenant runs as many jobs as its limit allows",
    rate_limit: "its tenant is over its rate", paused: "its tenant is paused",
    throttled: "a throttle rule sent it to a slower queue", scheduled: "it waits for its scheduled time",
    deferred: "it waits for its dependencies", retry_wait: "it failed and waits for its retry",
    rq_rate_limited: "rq's RateLimit holds it", finished: "it ended", failed: "it ended with an error",
    stopped: "it was stopped", canceled: "it was canceled",
    not_found: "no job has this id (never enqueued, or expired after its result_ttl)",
    backlog_cap: "its backlog reached its max_backlog: enqueues are refused",
    fair_share: "nothing holds it: its jobs wait their turn", not_waiting: "none of its jobs waits"
  };
  var TENANT_SAYS = {
    paused: "it is paused: none of its jobs start until it is resumed",
    concurrency_limit: "it runs as many jobs as its limit allows", rate_limit: "its rate allows its next start only later",
    throttled: "a throttle rule routes its next enqueue to a slower queue"
  };
  var JOB_IDS = { running: 1, running_jobs: 1 };  // facts listing job ids: each links to its own why

  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function known(x) { return x !== null && x !== undefined; }
  function link(kind, id) {
    return '<a class="why-link" href="?' + kind + "=" + esc(encodeURIComponent(id)) + '" data-' + kind + '="' +
      esc(id) + '"><code>' + esc(id) + "</code></a>";
  }
  function when(iso) {
    var at = new Date(iso), s = Math.round((at.getTime() - Date.now()) / 1000), a = Math.abs(s);
    var span = a < 90 ? a + " s" : a < 5400 ? Math.round(a / 60) + " min" : (a / 3600).toFixed(1) + " h";
    var today = at.toDateString() === new Date().toDateString();
    return '<span class="at">' + esc(today ? at.toLocaleTimeString() : at.toLocaleString()) + '</span> <span class="muted at">(' +
      (s >= 0 ? "in " + span : span + " ago") + ")</span>";
  }
  function value(name, v) {
    if (!known(v)) return '<span class="muted">—</span>';
    if (Array.isArray(v)) {
      return v.length ? v.map(function (x) { return JOB_IDS[name] ? link("job", x) : esc(x); }).join(", ") :
        '<span class="muted">none</span>';
    }
    if (typeof v === "object") {
      var keys = Object.keys(v);
      if (!keys.length) return '<span class="muted">none</span>';
      return keys.map(function (k) {
        return (name === "dependencies" ? link("job", k) : esc(k)) + ": " + value("", v[k]);
      }).join("<br>");
    }
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v === "string" && /^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(v)) return when(v);
    return esc(v);
  }
  function says(kind, reason) { return (kind === "tenant" && TENANT_SAYS[reason]) || SAYS[reason] || ""; }
  function badge(kind, reason, cls) {
    return '<span class="reason ' + cls + '" title="' + esc(says(kind, reason)) + '">' + esc(reason) + "</span>";
  }
  function facts(answer, linkTenant) {
    // In the answer's own order (fact_order: jsonify sorts keys); a list or a map gets a whole row.
    var names = (answer.fact_order || Object.keys(answer.facts)).filter(function (n) { return n in answer.facts; });
    var cells = names.map(function (name) {
      var v = answer.facts[name];
      var html = name === "tenant" && linkTenant && known(v) ? link("tenant", v) : value(name, v);
      var wide = known(v) && (typeof v === "object" ? JSON.stringify(v).length > 36 : String(v).length > 60);
      return '<div class="fact' + (wide ? " wide" : "") + '"><span class="k">' + esc(name) + '</span><span class="v">' +
        html + "</span></div>";
    });
    return cells.length ? '<div class="facts">' + cells.join("") + "</div>" : "";
  }
  function unknown(answer) {
    return answer.unknown.length ? '<ul class="unknown">' + answer.unknown.map(function (u) {
      return "<li>not recorded: " + esc(u) + "</li>";
    }).join("") + "</ul>" : "";
  }
  function head(kind, id, reasons) {
    var shown = id.length > 240 ? esc(id.slice(0, 120)) + '…<span class="muted"> (' + id.length + " characters)</span>" :
      esc(id);
    return '<div class="why-head"><h2>' + (kind === "job" ? "Job " : "Tenant ") + '<code class="id" title="' + esc(id) + '">' + shown +
      "</code></h2>" + '<button type="button" class="why-close" title="close">close ×</button></div>' +
      '<p class="why-reasons">' + badge(kind, reasons[0], "primary") +
      (reasons.length > 1 ? ' <span class="muted">also</span> ' + reasons.slice(1).map(function (r) {
        return badge(kind, r, "secondary");
      }).join(" ") : "") + ' <span class="says">' + esc(says(kind, reasons[0])) + "</span></p>";
  }
  function footer(url) {
    return '<p class="muted why-foot">as of ' + esc(new Date().toLocaleTimeString()) + " · read-only · " +
      '<a href="' + esc(url) + '">JSON</a></p>';
  }

  function renderJob(a, url) {
    var start = known(a.estimated_start) ? when(a.estimated_start) : '<span class="muted">none</span>';
    return head("job", a.job_id, [a.reason].concat(a.secondary)) +
      '<p class="why-start"><strong>Estimated start:</strong> ' + start +
      (a.estimate_basis ? '<br><span class="basis">' + esc(a.estimate_basis) + "</span>" : "") + "</p>" +
      facts(a, true) + unknown(a) + footer(url);
  }
  function renderTenant(a, url) {
    return head("tenant", a.tenant, a.reasons) + facts(a, false) + unknown(a) + footer(url);
  }

  function show(html) {
    panel.innerHTML = html;
    panel.hidden = false;
  }
  function load() {
    if (!current) return;
    var ask = ++asked, url = api + "/" + current.kind + "?id=" + encodeURIComponent(current.id);
    fetch(url, { cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) window.location.reload();
        return response.json().then(function (answer) { return { status: response.status, answer: answer }; });
      })
      .then(function (got) {
        if (ask !== asked || !current) return;  // a newer question, or closed
        var a = got.answer;
        if (known(a.error)) {
          show(head(current.kind, current.id, ["refused"]) + '<p class="warning">' + esc(a.error) + "</p>");
        } else {
          show(current.kind === "job" ? renderJob(a, url) : renderTenant(a, url));
        }
        panel.setAttribute("data-reason", known(a.error) ? "refused" : a.reason);
      })
      .catch(function (error) {
        if (ask === asked) show('<p class="warning">cannot ask: ' + esc(error.message) + "</p>");
      });
  }
  function ask(kind, id, push) {
    current = known(id) && id !== "" ? { kind: kind, id: id } : null;
    if (push) {
      var query = current ? "?" + kind + "=" + encodeURIComponent(id) : window.location.pathname;
      window.history.pushState(null, "", query);
    }
    clearInterval(timer);
    if (!current) {
      panel.hidden = true;
      panel.innerHTML = "";
      panel.removeAttribute("data-reason");
      return;
    }
    if (kind === "job") input.value = id;
    load();
    timer = setInterval(load, refreshMs);
    panel.scrollIntoView({ block: "nearest" });
  }
  function fromLocation() {
    var params = new URLSearchParams(window.location.search);
    if (params.has("job")) ask("job", params.get("job"), false);
    else if (params.has("tenant")) ask("tenant", params.get("tenant"), false);
    else ask(null, null, false);
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    ask("job", input.value.trim(), true);
  });
  document.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target.closest("a.why-link, button.why-close") : null;
    if (!target || event.ctrlKey || event.metaKey || event.shiftKey) return;  // a new tab follows the href
    event.preventDefault();
    if (target.tagName === "BUTTON") ask(null, null, true);
    else if (target.hasAttribute("data-job")) ask("job", target.getAttribute("data-job"), true);
    else ask("tenant", target.getAttribute("data-tenant"), true);
  });
  window.addEventListener("popstate", fromLocation);
  fromLocation();
})();
