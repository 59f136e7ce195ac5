// fair-router dashboard: renders api/snapshot into the page and redraws it every data-refresh seconds.
// Self-contained on purpose (no library, nothing fetched from elsewhere): the chart is plain SVG.
(function () {
  "use strict";
  var body = document.body;
  var api = body.getAttribute("data-api");
  var refreshMs = Math.max(500, parseFloat(body.getAttribute("data-refresh")) * 1000);
  var COLORS = ["#e8590c", "#1971c2", "#2f9e44", "#9c36b5", "#f59f00", "#0c8599"];
  var SVG = "http://www.w3.org/2000/svg";
  // Tenant actions (pause / resume): only when the server was started with them on (a flag and a token).
  var actions = body.getAttribute("data-actions");

  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function known(x) { return x !== null && x !== undefined; }
  function wait(s) {
    if (!known(s)) return "—";
    if (s < 0.01) return (s * 1000).toFixed(1) + " ms";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function count(n) { return known(n) ? Number(n).toLocaleString("en-US") : "—"; }
  function pct(x) { return known(x) ? (x * 100).toFixed(x < 0.1 ? 1 : 0) + "%" : "—"; }
  function cell(cls, value, html, title) {
    return '<td class="' + cls + '"' + (known(value) ? ' data-value="' + esc(value) + '"' : "") +
      (title ? ' title="' + esc(title) + '"' : "") + ">" + html + "</td>";
  }
  function fill(id, rows, empty) {
    var tbody = document.querySelector("#" + id + " tbody");
    var columns = document.querySelectorAll("#" + id + " thead th").length;
    tbody.innerHTML = rows.length ? rows.join("") :
      '<tr class="empty"><td colspan="' + columns + '">' + esc(empty) + "</td></tr>";
    styled(tbody);
  }
  // The Content-Security-Policy allows no inline style, so markup built here carries its sizes and colours
  // as data-css="property:value" (numbers and fixed colours only), set through the CSSOM, which it allows.
  function styled(root) {
    root.querySelectorAll("[data-css]").forEach(function (node) {
      var css = node.getAttribute("data-css"), colon = css.indexOf(":");
      node.style.setProperty(css.slice(0, colon), css.slice(colon + 1));
      node.removeAttribute("data-css");
    });
  }

  function downNote(s) {
    var down = (s.shard_servers || []).filter(function (v) { return !v.up; }).length;
    return down ? ", " + down + " shard server" + (down === 1 ? "" : "s") + " down" : "";
  }

  function renderCards(s) {
    var waiting = 0, running = 0;
    s.queues.forEach(function (q) { waiting += q.jobs; running += q.running; });
    var all = s.everyone;
    var cards = [
      ["jobs waiting", count(waiting), s.queues.length + (s.queues.length === 1 ? " queue" : " queues") + downNote(s)],
      ["jobs running", count(running), s.limits_enabled ? "concurrency limits on" : "concurrency limits off"],
      ["starts", count(all.wait_5m.starts), "last 5 min"],
      ["wait p50 · p95", wait(all.wait_5m.p50) + " · " + wait(all.wait_5m.p95), "all tenants, 5 min"],
      ["wait p95", wait(all.wait_60m.p95), "all tenants, 60 min"],
    ];
    document.getElementById("cards").innerHTML = cards.map(function (c) {
      return '<div class="card"><div class="label">' + esc(c[0]) + '</div><div class="value">' + esc(c[1]) +
        '</div><div class="muted">' + esc(c[2]) + "</div></div>";
    }).join("");
    var capped = document.getElementById("capped");
    capped.hidden = !s.capped_starts_5m;
    capped.textContent = s.capped_starts_5m ? count(s.capped_starts_5m) + " starts in the last 5 minutes came " +
      "from tenants past observe.tenants_per_minute and are counted under _other only." : "";
  }

  function shareBar(row) {
    if (!known(row.share_5m)) return "—";
    var marker = known(row.fair_share) ?
      '<span class="fair" data-css="left:' + Math.min(100, row.fair_share * 100).toFixed(1) + '%"></span>' : "";
    var over = known(row.fair_share) && row.share_5m > row.fair_share * 1.25 ? " over" : "";
    return '<div class="share"><div class="bar"><span class="fill' + over + '" data-css="width:' +
      Math.min(100, row.share_5m * 100).toFixed(1) + '%"></span>' + marker + '</div><span class="txt">' +
      pct(row.share_5m) + (known(row.fair_share) ? ' <span class="muted">/ ' + pct(row.fair_share) + "</span>" : "") +
      (row.alone ? ' <span class="muted alone">has the queue to itself</span>' : "") +
      "</span></div>";
  }

  function tenantRow(row, s, other) {
    var queues = Object.keys(row.waiting);
    var perQueue = queues.map(function (q) { return q + ": " + row.waiting[q]; }).join("\n");
    var running = "—", runTitle = "concurrency limits off: running jobs are not known per tenant";
    if (s.limits_enabled && known(row.running)) {
      var full = known(row.limit) && row.running >= row.limit;
      running = '<div class="slots' + (full ? " full" : "") + '"><div class="bar"><span data-css="width:' +
        (known(row.limit) ? Math.min(100, 100 * row.running / Math.max(1, row.limit)) : 0).toFixed(0) +
        '%"></span></div>' + row.running + (known(row.limit) ? " / " + row.limit : "") + "</div>";
      runTitle = full ? "at its limit" : "";
    }
    var badges = row.parked.map(function (q) {
      return '<span class="badge parked" title="held (concurrency limit, rate or pause): skipped by pops of ' +
        esc(q) + '">parked · ' + esc(q) + "</span>";
    });
    if (row.paused) {
      badges.unshift('<span class="badge paused" title="paused: none of its jobs start until it is resumed">' +
        "paused</span>");
    }
    var state = badges.length ? badges.join(" ") : (row.waiting_total > 0 ?
      '<span class="badge waiting">waiting</span>' : '<span class="badge idle">none waiting</span>');
    if (actions && !other && row.key && row.key.charAt(0) !== "#") {
      state += ' <button type="button" class="action" data-action="' + (row.paused ? "resume" : "pause") +
        '" data-tenant="' + esc(row.tenant) + '">' + (row.paused ? "resume" : "pause") + "</button>";
    }
    if (other) state = '<span class="muted">every other tenant</span>';
    var name = other ? "<em>" + esc(row.tenant) + "</em>" : '<span class="name">' + esc(row.tenant) + "</span>";
    if (!other && row.key && row.key.charAt(0) !== "#") {  // a digest or no tenant: no id to ask about
      name += ' <a class="why-link" href="?tenant=' + esc(encodeURIComponent(row.tenant)) + '" data-tenant="' +
        esc(row.tenant) + '" title="why are this tenant\'s jobs slow?">why</a>';
    }
    return '<tr data-tenant="' + esc(row.tenant) + '"' + (other ? ' class="other"' : "") + ">" +
      cell("tenant", row.tenant, name) + orgCell(row, s, other) + (s.tiers_named || other ? cell("tier", row.tier, esc(row.tier || "—")) :
        cell("tier", row.tier, '<span class="muted">—</span>', "no tiers in the settings: every tenant has the " +
          "built-in default tier, " + row.tier)) +
      cell("waiting num", row.waiting_total, count(row.waiting_total), perQueue) +
      cell("running", row.running, running, runTitle) +
      cell("rule", row.rule, row.rule ? esc(row.rule) : '<span class="muted">—</span>') +
      cell("state", null, state) +
      cell("wait-5m num", row.wait_5m.p95, '<span class="p50-5m">' + wait(row.wait_5m.p50) +
        '</span> · <span class="p95-5m"' + (known(row.wait_5m.p95) ? ' data-value="' + row.wait_5m.p95 + '"' : "") +
        ">" + wait(row.wait_5m.p95) + "</span>", count(row.wait_5m.starts) + " starts") +
      cell("wait-60m num", row.wait_60m.p95, wait(row.wait_60m.p50) + " · " + wait(row.wait_60m.p95),
        count(row.wait_60m.starts) + " starts") +
      cell("share", row.share_5m, shareBar(row)) + "</tr>";
  }

  // Organisations (fair_org): a column in the tenants table and a table of their own, both only while an org waits.
  function hasOrgs(s) { return (s.orgs || []).length > 0; }
  function orgCell(row, s, other) {
    if (!hasOrgs(s)) return "";
    if (other || !known(row.org)) return cell("org", null, '<span class="muted">—</span>',
      other ? "" : "no organisation: the tenant is its own");
    return cell("org", row.org, '<span class="org-name">' + esc(row.org) + '</span> <span class="muted">· ' +
      pct(row.org_share) + "</span>", "its organisation and that org's fair share");
  }
  function renderOrgs(s) {
    var show = hasOrgs(s);
    document.getElementById("org-col").hidden = !show;
    document.getElementById("orgs-panel").hidden = !show;
    if (!show) return;
    var rows = s.orgs.concat(s.other_orgs ? [s.other_orgs] : []).map(function (o) {
      var other = !o.key;
      var perQueue = Object.keys(o.waiting).map(function (q) { return q + ": " + o.waiting[q]; }).join("\n");
      var names = other ? '<span class="muted">every other org</span>' : o.tenants.map(function (t) {
        return '<span class="badge tenant">' + esc(t) + "</span>";
      }).join(" ") + (o.tenants_waiting > o.tenants.length ?
        ' <span class="muted">+' + (o.tenants_waiting - o.tenants.length) + " more</span>" : "");
      return '<tr data-org="' + esc(o.org) + '"' + (other ? ' class="other"' : "") + ">" +
        cell("org", o.org, other ? "<em>" + esc(o.org) + "</em>" : '<span class="name">' + esc(o.org) + "</span>") +
        cell("num", o.weight, known(o.weight) ? esc(o.weight) : "—") +
        cell("num fair-share", o.fair_share, pct(o.fair_share)) +
        cell("num", o.tenants_waiting, count(o.tenants_waiting)) +
        cell("num", o.waiting_total, count(o.waiting_total), perQueue) +
        cell("num", o.parked, count(o.parked)) + cell("org-tenants", null, names) + "</tr>";
    });
    fill("orgs", rows, "no organisation has jobs waiting");
    document.getElementById("orgs-note").textContent = "top " + s.top_n + " by jobs waiting in fair queues";
  }

  function renderTenants(s) {
    var rows = s.tenants.map(function (row) { return tenantRow(row, s, false); });
    if (s.tenants.length) rows.push(tenantRow(s.other, s, true));
    fill("tenants", rows, "no tenant has jobs waiting, running or started lately");
    document.getElementById("tenants-note").textContent = "top " + s.top_n + " by jobs waiting and running";
  }

  function renderQueues(s) {
    fill("queues", s.queues.map(function (q) {
      var server = q.server ? esc(q.server) : '<span class="muted">redis_url</span>';
      if (q.down) server += ' <span class="badge down">down</span>';
      var dash = q.down ? "—" : null;
      return '<tr data-queue="' + esc(q.name) + '" data-server="' + esc(q.server) + '"' +
        (q.down ? ' class="down"' : "") + ">" + cell("name", q.name, esc(q.name).replace(/_/g, "_<wbr>")) + cell("", null, server) +
        cell("num", q.weight, esc(typeof q.weight === "number" ? String(q.weight) : q.weight)) +
        cell("num", q.down ? null : q.jobs, dash || count(q.jobs)) +
        cell("num", q.down ? null : q.running, dash || count(q.running)) +
        cell("", null, (q.fair ? '<span class="badge fairq">fair</span>' : '<span class="muted">plain</span>') +
          (q.plain_pops ? ' <span class="badge plainpop" title="taken first-in first-out by a worker that is not ' +
            "fair-router's (a plain rq worker): start it with -w fair_router.WeightedWorker\">" +
            count(q.plain_pops) + "+ jobs taken by a plain rq worker</span>" : "") +
          (q.approximate ? ' <span class="badge plainpop" title="more jobs wait than a read compares with rq\'s ' +
            'list: tenant counts may include jobs rq removed and miss jobs rq requeued, until workers pop them">' +
            "counts approximate</span>" : "")) +
        cell("num", null, q.fair && !q.down ? count(q.tenants_waiting) : "—") +
        cell("num", null, q.fair && !q.down ? count(q.tenants_parked) : "—") + "</tr>";
    }), "no queues yet");
  }

  function renderCounters(s) {
    fill("routed", s.routed.map(function (r) {
      return "<tr>" + cell("", null, esc(r.job)) + cell("", null, esc(r.queue)) + cell("num", r.jobs, count(r.jobs)) +
        "</tr>";
    }), "no routed jobs");
    fill("limits", s.limits.map(function (t) {
      return '<tr data-tier="' + esc(t.tier) + '">' + cell("", null, esc(t.tier)) + ["acquired", "refused", "paused",
        "rate_deferred", "snoozed", "parked", "released", "reclaimed"].map(function (k) {
          return cell("num " + k, t[k] || 0, count(t[k] || 0));
        }).join("") + "</tr>";
    }), "no job start held or slot taken yet");
    fill("events", s.events.map(function (e) {
      return "<tr>" + cell("", null, esc(e.event)) + cell("", null, esc(e.queue)) + cell("num", e.count, count(e.count)) +
        "</tr>";
    }), "none");
    fill("iterations", (s.iterations || []).map(function (it) {
      return "<tr>" + cell("", null, esc(it.job_id)) + cell("", null, esc(it.queue)) +
        cell("", null, known(it.tenant) ? esc(it.tenant) : '<span class="muted">—</span>') +
        cell("", null, esc(it.func)) + cell("", null, "<code>" + esc(it.cursor) + "</code>") +
        cell("num", it.turns, count(it.turns)) + cell("num", it.items, count(it.items)) + "</tr>";
    }), "none running");
  }

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (known(text)) node.textContent = text;
    return node;
  }

  function renderChart(s) {
    var box = document.getElementById("chart");
    var lines = s.tenants.filter(function (row) { return row.series.length; }).slice(0, COLORS.length - 1)
      .map(function (row, i) { return { name: row.tenant, points: row.series, color: COLORS[i] }; });
    if (s.other.series.length && s.tenants.length) {
      lines.push({ name: "_other", points: s.other.series, color: "#868e96", dashed: true });
    }
    var W = 640, H = 260, L = 64, R = 16, T = 12, B = 28;
    // The last 10 minutes at most; since the first point shown, but never under 2 minutes.
    var x1 = s.at, first = x1, ys = [];
    lines.forEach(function (line) {
      line.points.forEach(function (p) { ys.push(Math.max(p[1], 1e-4)); first = Math.min(first, p[0]); });
    });
    var span = Math.min(s.tick_seconds * 60, Math.max(120, Math.ceil((x1 - first + s.tick_seconds) / 60) * 60));
    var x0 = x1 - span, step = span <= 180 ? 30 : span <= 360 ? 60 : 120;
    var lo = Math.pow(10, Math.floor(Math.log10(ys.length ? Math.min.apply(null, ys) : 0.001)));
    var hi = Math.pow(10, Math.ceil(Math.log10(ys.length ? Math.max.apply(null, ys) : 1)));
    if (hi <= lo) hi = lo * 10;
    function X(t) { return L + (W - L - R) * (t - x0) / span; }
    function Y(v) { return T + (H - T - B) * (1 - (Math.log10(Math.max(v, lo)) - Math.log10(lo)) / Math.log10(hi / lo)); }
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "mean wait per tenant" });
    for (var d = lo; d <= hi * 1.0001; d *= 10) {
      svg.appendChild(el("line", { x1: L, x2: W - R, y1: Y(d), y2: Y(d), "class": "grid" }));
      svg.appendChild(el("text", { x: L - 8, y: Y(d) + 4, "text-anchor": "end", "class": "axis" }, wait(d)));
    }
    for (var back = 0; back <= span; back += step) {
      var t = x1 - back;
      svg.appendChild(el("line", { x1: X(t), x2: X(t), y1: T, y2: H - B, "class": "grid v" }));
      svg.appendChild(el("text", { x: X(t), y: H - 8, "text-anchor": "middle", "class": "axis" },
        back === 0 ? "now" : back % 60 ? "−" + (back / 60).toFixed(1) + " min" : "−" + back / 60 + " min"));
    }
    lines.forEach(function (line) {
      var pts = line.points.filter(function (p) { return p[0] + s.tick_seconds > x0; });
      function mid(p) { return X(Math.min(p[0] + s.tick_seconds / 2, x1)); }  // the current tick ends now
      var d = pts.map(function (p, i) { return (i ? "L" : "M") + mid(p).toFixed(1) + " " + Y(p[1]).toFixed(1); })
        .join(" ");
      if (pts.length > 1) {
        svg.appendChild(el("path", { d: d, stroke: line.color, "class": "series" + (line.dashed ? " dashed" : "") }));
      }
      pts.forEach(function (p) {
        var dot = el("circle", { cx: mid(p), cy: Y(p[1]), r: 3, fill: line.color });
        dot.appendChild(el("title", {}, line.name + ": " + wait(p[1])));
        svg.appendChild(dot);
      });
    });
    box.innerHTML = "";
    if (!lines.length) {
      box.innerHTML = '<p class="muted empty-chart">no starts in the last 10 minutes</p>';
      return;
    }
    box.appendChild(svg);
    var legend = document.createElement("div");
    legend.className = "legend";
    legend.innerHTML = lines.map(function (line) {
      var last = line.points[line.points.length - 1];
      return '<span><i data-css="background:' + line.color + '"></i>' + esc(line.name) +
        ' <span class="muted">' + wait(last[1]) + "</span></span>";
    }).join("");
    styled(legend);
    box.appendChild(legend);
  }

  function render(s) {
    renderCards(s);
    renderTenants(s);
    renderOrgs(s);
    renderQueues(s);
    renderChart(s);
    renderCounters(s);
    document.getElementById("updated").textContent = "updated " + new Date(s.at * 1000).toLocaleTimeString();
    document.getElementById("dot").className = "dot ok";
    body.setAttribute("data-rendered", String(s.at));
  }

  function poll() {
    fetch(api, { cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) window.location.reload();  // signed out: the page shows the sign-in form
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(render)
      .catch(function (error) {
        document.getElementById("dot").className = "dot err";
        document.getElementById("updated").textContent = "cannot refresh: " + error.message;
      })
      .then(function () { setTimeout(poll, refreshMs); });
  }

  // Tenant actions: POST with the token the operator typed (kept for this tab only), then redraw.
  document.getElementById("tenants").addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button.action") : null;
    if (!button || !actions) return;
    var token = sessionStorage.getItem("fair-router-token") ||
      window.prompt("Dashboard token (FAIR_ROUTER_DASHBOARD_TOKEN) to " + button.getAttribute("data-action") +
        " " + button.getAttribute("data-tenant"));
    if (!token) return;
    button.disabled = true;
    fetch(actions + "/" + button.getAttribute("data-action"), {
      method: "POST", cache: "no-store",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token },
      body: JSON.stringify({ tenant: button.getAttribute("data-tenant") })
    }).then(function (response) {
      if (response.status === 403) sessionStorage.removeItem("fair-router-token");
      else if (response.ok) sessionStorage.setItem("fair-router-token", token);
      if (!response.ok) throw new Error("HTTP " + response.status);
      return fetch(api, { cache: "no-store" }).then(function (r) { return r.json(); }).then(render);
    }).catch(function (error) {
      document.getElementById("updated").textContent = "action failed: " + error.message;
      button.disabled = false;
    });
  });

  render(JSON.parse(document.getElementById("initial").textContent));
  setTimeout(poll, refreshMs);
})();
