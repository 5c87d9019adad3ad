/* cogworker dashboard: live refresh, actions in place, confirmation, local times.
 *
 * Without this script every page still works: links and forms do plain requests.
 * With it:
 *  - an element with hx-get and hx-trigger="every Ns [...]" refreshes its content from that
 *    URL every N seconds while Live is on and the page is visible;
 *  - a form with hx-post is posted in the background and the answer replaces the content of
 *    its hx-target; with data-cw-confirm a dialog asks first;
 *  - every <time data-cw-time> shows its instant in the browser's time zone;
 *  - an element with data-cw-load fetches its content once (see loadSection);
 *  - a link or GET form with data-cw-in-place="<selector>" redraws that container in place
 *    (and keeps the address bar in step); a link with data-cw-backtrace opens its text in the
 *    History backtrace dialog (see the in-place section).
 * Requests that refresh or act carry "HX-Request: true": the server answers a fragment.
 */
(function () {
  "use strict";

  var LIVE_KEY = "cogworkerLiveUpdate";
  var WIDE_KEY = "cogworkerWideLayout";

  function readFlag(key, fallback) {
    try {
      var value = window.localStorage.getItem(key);
      return value === null ? fallback : value === "true";
    } catch (error) {
      return fallback;
    }
  }

  function storeFlag(key, on) {
    try {
      window.localStorage.setItem(key, on ? "true" : "false");
    } catch (error) { /* storage refused: the setting lasts for this page only */ }
  }

  function each(root, selector, callback) {
    Array.prototype.forEach.call(root.querySelectorAll(selector), callback);
  }

  /* -- Live and width toggles ------------------------------------------------------------ */

  window.cogworkerLiveUpdate = readFlag(LIVE_KEY, true);
  /* The toggles are buttons with aria-pressed: the label stays, the state shows as pressed. */
  window.cogworkerSetLiveUpdate = function (on) {
    on = !!on;
    window.cogworkerLiveUpdate = on;
    storeFlag(LIVE_KEY, on);
    each(document, "[data-cw-live-toggle]", function (button) {
      button.setAttribute("aria-pressed", on ? "true" : "false");
      button.title = on ? "Refreshing this tab live: click to stop" : "Not refreshing: click to refresh live";
    });
  };

  window.cogworkerWideLayout = readFlag(WIDE_KEY, false);
  window.cogworkerSetWideLayout = function (on) {
    on = !!on;
    window.cogworkerWideLayout = on;
    storeFlag(WIDE_KEY, on);
    var main = document.getElementById("cw-main");
    if (main) { main.classList.toggle("cw-main--wide", on); }
    each(document, "[data-cw-wide-toggle]", function (button) {
      button.setAttribute("aria-pressed", on ? "true" : "false");
      button.title = on ? "Using the full window width: click for a fixed width" : "Click to use the full window width";
    });
  };

  /* -- times in the browser's zone --------------------------------------------------------- */

  function pad(number) { return (number < 10 ? "0" : "") + number; }

  function zoneName(date) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(date);
      for (var i = 0; i < parts.length; i++) {
        if (parts[i].type === "timeZoneName") { return parts[i].value; }
      }
    } catch (error) { /* no Intl: fall through */ }
    return "";
  }

  /* The strftime directives the server accepts for time_format, rendered in local time. */
  function formatTime(date, pattern) {
    pattern = pattern || window.COGWORKER_TIME_FORMAT || "%Y-%m-%d %H:%M:%S";
    return pattern.replace(/%(.)/g, function (all, code) {
      switch (code) {
        case "Y": return String(date.getFullYear());
        case "y": return pad(date.getFullYear() % 100);
        case "m": return pad(date.getMonth() + 1);
        case "d": return pad(date.getDate());
        case "e": return (date.getDate() < 10 ? " " : "") + date.getDate();
        case "H": return pad(date.getHours());
        case "I": return pad(date.getHours() % 12 || 12);
        case "M": return pad(date.getMinutes());
        case "S": return pad(date.getSeconds());
        case "p": return date.getHours() < 12 ? "AM" : "PM";
        case "B": return date.toLocaleString(undefined, { month: "long" });
        case "b": return date.toLocaleString(undefined, { month: "short" });
        case "A": return date.toLocaleString(undefined, { weekday: "long" });
        case "a": return date.toLocaleString(undefined, { weekday: "short" });
        case "Z": return zoneName(date);
        case "%": return "%";
        default: return all;
      }
    });
  }
  window.cogworkerFormatTime = formatTime;

  function localizeTimes(root) {
    each(root, "time[data-cw-time]", function (element) {
      var stamp = element.getAttribute("datetime");
      var date = new Date(stamp);
      if (isNaN(date.getTime())) { return; }
      element.title = stamp.replace("T", " ").replace("Z", " UTC");
      element.textContent = formatTime(date);
    });
  }

  /* -- notices and swapping -------------------------------------------------------------- */

  var toastTimer = null;
  function toast(text, tone) {
    var box = document.getElementById("cw-toast");
    if (!box) { return; }
    box.textContent = text;
    box.className = "cw-toast cw-toast-" + (tone || "success");
    box.hidden = false;
    window.clearTimeout(toastTimer);
    toastTimer = window.setTimeout(function () { box.hidden = true; }, 8000);
  }

  /* A key that finds "the same" control again after its container was redrawn. */
  function focusKey(element) {
    if (!element || element === document.body) { return null; }
    if (element.form && element.form.hasAttribute("hx-post")) {
      return { form: element.form.getAttribute("hx-post"), label: element.getAttribute("aria-label") || element.textContent };
    }
    if (element.tagName === "A") { return { href: element.getAttribute("href") }; }
    return null;
  }

  function refocus(container, key) {
    if (!key) { return; }
    var found = null;
    each(container, key.href ? "a[href]" : "form[hx-post] button", function (candidate) {
      if (found) { return; }
      if (key.href ? candidate.getAttribute("href") === key.href
          : candidate.form.getAttribute("hx-post") === key.form &&
            (candidate.getAttribute("aria-label") || candidate.textContent) === key.label) {
        found = candidate;
      }
    });
    if (found) { found.focus(); return; }
    if (!container.hasAttribute("tabindex")) { container.setAttribute("tabindex", "-1"); }
    container.focus();
  }

  /* -- sections read on their own --------------------------------------------------------- */

  /* An element with data-cw-load="<url>" shows that URL's fragment (in its
   * [data-cw-load-into] part), fetched once when it appears: what is costly to read is not
   * read again at every refresh. With data-cw-preserve, a refresh of its container keeps the
   * element already loaded (same id, same URL); a [data-cw-reload] link in it loads it again. */
  function loadSection(section) {
    var into = section.querySelector("[data-cw-load-into]") || section;
    section.setAttribute("data-cw-loaded", "");
    section.setAttribute("aria-busy", "true");
    var waiting = document.createElement("p");
    waiting.className = "muted";
    waiting.textContent = "Looking…";
    into.replaceChildren(waiting);
    window.fetch(section.getAttribute("data-cw-load"), {
      headers: { "HX-Request": "true" }, credentials: "same-origin", cache: "no-store"
    }).then(fragmentOf).then(function (html) {
      into.innerHTML = html;
      localizeTimes(into);
    }).catch(function (error) {
      waiting.textContent = "Could not read this (" + error.message + "): reload the page to try again.";
    }).then(function () { section.removeAttribute("aria-busy"); });
  }

  function loadSections(root) {
    each(root, "[data-cw-load]:not([data-cw-loaded])", loadSection);
  }

  document.addEventListener("click", function (event) {
    var link = event.target instanceof Element ? event.target.closest("[data-cw-reload]") : null;
    var section = link ? link.closest("[data-cw-load]") : null;
    if (!section) { return; }
    event.preventDefault();
    loadSection(section);
  });

  function swap(container, html) {
    var active = document.activeElement;
    var key = container.contains(active) ? focusKey(active) : null;
    var hadFocus = container.contains(active) && active !== container;
    var kept = {};
    each(container, "[data-cw-preserve][data-cw-loaded][id]", function (element) { kept[element.id] = element; });
    container.innerHTML = html;
    each(container, "[data-cw-preserve][id]", function (element) {
      var old = kept[element.id];
      if (old && old.getAttribute("data-cw-load") === element.getAttribute("data-cw-load")) {
        element.replaceWith(old);
      }
    });
    localizeTimes(container);
    loadSections(container);
    each(container, "[data-cw-toast]", function (element) {
      toast(element.textContent, element.getAttribute("data-cw-toast"));
      element.remove();
    });
    if (hadFocus) { refocus(container, key); }
  }

  function fragmentOf(response) {
    if (!response.ok) {
      return response.text().then(function (text) {
        throw new Error(response.status + ": " + text.slice(0, 300));
      });
    }
    if (response.redirected) { throw new Error("the server redirected (is the session still valid?)"); }
    return response.text();
  }

  /* -- live refresh ---------------------------------------------------------------------- */

  function dialogOpen() {
    return !!document.querySelector("dialog[open]");
  }

  function markStale(stale) {
    each(document, "[data-cw-live-toggle]", function (button) {
      if (stale) { button.setAttribute("data-cw-stale", ""); } else { button.removeAttribute("data-cw-stale"); }
    });
  }

  function refresh(container) {
    if (!window.cogworkerLiveUpdate || document.hidden || dialogOpen() || container.cwBusy) { return; }
    container.cwBusy = true;
    window.fetch(container.getAttribute("hx-get"), {
      headers: { "HX-Request": "true" }, credentials: "same-origin", cache: "no-store"
    }).then(fragmentOf).then(function (html) {
      swap(container, html);
      markStale(false);
    }).catch(function () {
      markStale(true);
    }).then(function () { container.cwBusy = false; });
  }

  function startPolling(container) {
    var match = /every\s+([0-9.]+)s/.exec(container.getAttribute("hx-trigger") || "");
    var seconds = match ? parseFloat(match[1]) : 0;
    if (seconds > 0) {
      window.setInterval(function () { refresh(container); }, seconds * 1000);
    }
  }

  /* -- actions --------------------------------------------------------------------------- */

  function postBody(form) {
    var body = new URLSearchParams();
    Array.prototype.forEach.call(form.elements, function (field) {
      if (!field.name || field.hasAttribute("data-cw-get-only")) { return; }
      if (field.disabled && !field.hasAttribute("data-cw-post-only")) { return; }
      body.append(field.name, field.value);
    });
    return body;
  }

  function post(form) {
    var target = document.querySelector(form.getAttribute("hx-target"));
    if (!target) { HTMLFormElement.prototype.submit.call(form); return; }
    var buttons = form.querySelectorAll("button");
    each(form, "button", function (button) { button.disabled = true; });
    window.fetch(form.getAttribute("hx-post"), {
      method: "POST", body: postBody(form), headers: { "HX-Request": "true" }, credentials: "same-origin"
    }).then(fragmentOf).then(function (html) {
      swap(target, html);
    }).catch(function (error) {
      Array.prototype.forEach.call(buttons, function (button) { button.disabled = false; });
      toast("The action failed: " + error.message, "danger");
    });
  }

  function confirmThen(form, proceed) {
    var question = form.getAttribute("data-cw-confirm");
    var dialog = document.getElementById("cw-confirm");
    if (!dialog || typeof dialog.showModal !== "function") {
      if (window.confirm(question)) { proceed(); }
      return;
    }
    dialog.querySelector("[data-cw-confirm-text]").textContent = question;
    var ok = dialog.querySelector("[data-cw-confirm-ok]");
    ok.textContent = form.getAttribute("data-cw-confirm-button") || "Confirm";
    ok.className = "btn btn-" + (form.getAttribute("data-cw-variant") || "danger");
    var opener = document.activeElement;
    dialog.returnValue = "";
    dialog.addEventListener("close", function () {
      if (dialog.returnValue === "confirm") { proceed(); } else if (opener && opener.focus) { opener.focus(); }
    }, { once: true });
    dialog.showModal();
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("hx-post")) { return; }
    event.preventDefault();
    if (form.hasAttribute("data-cw-confirm")) {
      confirmThen(form, function () { post(form); });
    } else {
      post(form);
    }
  });

  /* -- in-place views (History) ----------------------------------------------------------- */

  /* A link or GET form with data-cw-in-place="<selector>" fetches its view's fragment and
   * swaps it into that container, which then refreshes from the new address; the address bar
   * follows, and Back reloads the page it names. The form's typed fields and hidden fields
   * follow the new address too (a sort link changes the sort the form carries). */
  function formAddress(form) {
    var params = new URLSearchParams();
    Array.prototype.forEach.call(form.elements, function (field) {
      if (!field.name || field.disabled || field.value === "") { return; }
      if ((field.type === "radio" || field.type === "checkbox") && !field.checked) { return; }
      params.append(field.name, field.value);
    });
    var query = params.toString();
    return form.getAttribute("action") + (query ? "?" + query : "");
  }

  var TYPED = { hidden: true, text: true, search: true, number: true, "datetime-local": true };

  function syncForms(address) {
    var params = new URL(address, window.location.href).searchParams;
    each(document, "form[data-cw-in-place]", function (form) {
      Array.prototype.forEach.call(form.elements, function (field) {
        if (field.name && TYPED[field.type] && field !== document.activeElement) {
          field.value = params.get(field.name) || "";
        }
      });
    });
  }

  function showInPlace(selector, address) {
    var target = document.querySelector(selector);
    if (!target) { window.location.assign(address); return; }
    target.setAttribute("aria-busy", "true");
    window.fetch(address, {
      headers: { "HX-Request": "true" }, credentials: "same-origin", cache: "no-store"
    }).then(fragmentOf).then(function (html) {
      target.setAttribute("hx-get", address);
      swap(target, html);
      if (!(window.history.state && window.history.state.cwInPlace)) {
        window.history.replaceState({ cwInPlace: true }, "");
      }
      window.history.pushState({ cwInPlace: true }, "", address);
      syncForms(address);
      markStale(false);
    }).catch(function (error) {
      toast("Could not show this view: " + error.message, "danger");
    }).then(function () { target.removeAttribute("aria-busy"); });
  }

  window.addEventListener("popstate", function (event) {
    if (event.state && event.state.cwInPlace) { window.location.reload(); }
  });

  var typingTimer = null;
  function applyForm(form, delay) {
    window.clearTimeout(typingTimer);
    typingTimer = window.setTimeout(function () {
      if (typeof form.checkValidity === "function" && !form.checkValidity()) { return; }
      showInPlace(form.getAttribute("data-cw-in-place"), formAddress(form));
    }, delay);
  }

  document.addEventListener("input", function (event) {
    var field = event.target;
    var form = field && field.form;
    if (form && form.hasAttribute("data-cw-in-place") && TYPED[field.type]) { applyForm(form, 400); }
  });
  document.addEventListener("change", function (event) {
    var field = event.target;
    var form = field && field.form;
    if (form && form.hasAttribute("data-cw-in-place") && !TYPED[field.type]) { applyForm(form, 0); }
  });

  function openBacktrace(link) {
    var dialog = document.getElementById("history-backtrace-dialog");
    var content = document.getElementById("history-backtrace-content");
    if (!dialog || !content || typeof dialog.showModal !== "function") { return false; }
    var title = document.getElementById("history-backtrace-title");
    if (title) { title.textContent = link.getAttribute("data-cw-title") || "Backtrace"; }
    content.textContent = "Reading…";
    dialog.showModal();
    window.fetch(link.getAttribute("href"), {
      headers: { "HX-Request": "true" }, credentials: "same-origin", cache: "no-store"
    }).then(function (response) {
      return response.text();  /* a run gone answers 404 with the text saying so */
    }).then(function (html) {
      /* the fragment is escaped text: parsed inertly, shown as text */
      content.textContent = new DOMParser().parseFromString(html, "text/html").body.textContent;
    }).catch(function (error) {
      content.textContent = "Could not read this run: " + error.message;
    });
    return true;
  }

  document.addEventListener("click", function (event) {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) { return; }
    var link = event.target instanceof Element ? event.target.closest("a[data-cw-backtrace], a[data-cw-in-place]") : null;
    if (!link) { return; }
    if (link.hasAttribute("data-cw-backtrace")) {
      if (openBacktrace(link)) { event.preventDefault(); }
      return;
    }
    event.preventDefault();
    showInPlace(link.getAttribute("data-cw-in-place"), link.getAttribute("href"));
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-cw-in-place")) { return; }
    event.preventDefault();
    applyForm(form, 0);
  });

  /* -- start ----------------------------------------------------------------------------- */

  function start() {
    var root = document.documentElement;
    root.classList.add("cw-js");
    window.COGWORKER_TIME_FORMAT = root.getAttribute("data-cw-time-format") || "%Y-%m-%d %H:%M:%S";
    each(document, "[data-cw-live-toggle]", function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        window.cogworkerSetLiveUpdate(!window.cogworkerLiveUpdate);
      });
    });
    each(document, "[data-cw-wide-toggle]", function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        window.cogworkerSetWideLayout(!window.cogworkerWideLayout);
      });
    });
    window.cogworkerSetLiveUpdate(window.cogworkerLiveUpdate);
    window.cogworkerSetWideLayout(window.cogworkerWideLayout);
    localizeTimes(document);
    loadSections(document);
    each(document, "[hx-get][hx-trigger]", startPolling);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
}());
