// The execution page's time travel control: a range over the run's history seqs, the
// previous / next event buttons and the ← / → keys, and the banner "Viewing seq N of M
// (time) — back to live" while the position is off the head. It only says where the
// operator is: the page (execution.js) fetches the view as of that seq. Moves are
// debounced here, so dragging across many events asks the server once; the label and the
// banner follow at once. Reaching the last seq is the same as going back to live.

import { esc, when } from './api.js';

/** How long the position must rest before the page is asked to fetch it. */
export const DEBOUNCE_MS = 250;

/** A seq from the URL's `at`: a positive integer, or null (live). */
export function parseAt(value) {
  const n = Number(value);
  return Number.isInteger(n) && n > 0 ? n : null;
}

/** `url`'s path with `at` set (or removed for live), the rest of the query kept. */
export function withAt(url, at) {
  const q = new URLSearchParams(url.search);
  if (at == null) q.delete('at'); else q.set('at', at);
  const query = q.toString();
  return `${url.pathname}${query ? `?${query}` : ''}`;
}

/** Mounts the scrubber into `el` (emptied). `onMove(seq)` is called, debounced, with the
 * seq picked, or null for live. Returns `{update(events, at), move(seq, now), stop()}`. */
export function scrubber(el, onMove) {
  el.className = 'scrubber';
  el.innerHTML = `
    <p id="scrub-banner" class="banner" role="status" hidden></p>
    <div class="scrub-controls">
      <button id="scrub-prev" type="button" title="Previous event (←)" aria-label="Previous event">◀</button>
      <input id="scrub-range" type="range" min="1" max="1" step="1" value="1" aria-label="History seq">
      <button id="scrub-next" type="button" title="Next event (→)" aria-label="Next event">▶</button>
      <span id="scrub-label" class="mono"></span>
    </div>`;
  const range = el.querySelector('#scrub-range');
  const label = el.querySelector('#scrub-label');
  const banner = el.querySelector('#scrub-banner');
  let events = [];
  let at = null; // null: live (the head)
  let timer = null; // a move waiting for its debounce
  // Seqs are uint64, strings in proto3 JSON.
  const last = () => (events.length ? Number(events[events.length - 1].seq) : 0);
  const first = () => (events.length ? Number(events[0].seq) : 0);
  const event = (seq) => events.find((e) => Number(e.seq) === seq);

  const draw = () => {
    const m = last();
    const seq = at ?? m;
    range.min = String(first() || 1);
    range.max = String(m || 1);
    range.value = String(seq || 1);
    range.disabled = events.length < 2;
    const e = event(seq);
    const text = e ? `${e.eventType}${e.step ? ` · ${e.step}` : ''}` : '';
    range.setAttribute('aria-valuetext', `seq ${seq} of ${m}${text ? `, ${text}` : ''}`);
    label.textContent = `${at == null ? 'live · ' : ''}seq ${seq} of ${m}${text ? ` · ${text}` : ''}`;
    el.querySelector('#scrub-prev').disabled = seq <= first();
    el.querySelector('#scrub-next').disabled = at == null;
    banner.hidden = at == null;
    el.classList.toggle('past', at != null);
    if (at != null) {
      banner.innerHTML = `Viewing seq <b id="scrub-seq">${esc(seq)}</b> of <b>${esc(m)}</b> (${esc(when(e?.timestamp))}) — <a href="${esc(withAt(location, null))}" id="scrub-live">back to live</a>`;
    }
  };

  /** Goes to `seq` (null or the last seq: live); `now` skips the debounce. */
  const move = (seq, now = false) => {
    const m = last();
    const next = seq == null || seq >= m ? null : Math.max(first(), seq);
    if (next === at && !now) return;
    at = next;
    draw();
    clearTimeout(timer);
    timer = null;
    if (now) onMove(at); else timer = setTimeout(() => { timer = null; onMove(at); }, DEBOUNCE_MS);
  };

  range.addEventListener('input', () => move(Number(range.value)));
  el.querySelector('#scrub-prev').onclick = () => move((at ?? last()) - 1);
  el.querySelector('#scrub-next').onclick = () => move((at ?? last()) + 1);
  banner.addEventListener('click', (e) => {
    if (!e.target.closest('#scrub-live') || e.ctrlKey || e.metaKey || e.shiftKey) return;
    e.preventDefault();
    e.stopPropagation();
    move(null, true);
  });
  // ← / → anywhere on the page but in a field (the range itself moves natively).
  const keys = (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.target.closest?.('input, textarea, select, dialog')) return;
    if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight') return;
    e.preventDefault();
    move((at ?? last()) + (e.key === 'ArrowLeft' ? -1 : 1));
  };
  document.addEventListener('keydown', keys);

  return {
    /** The run's history and the position the page shows (null: live); a move still
     * waiting for its debounce keeps its position. */
    update(list, seq) { events = list; if (timer == null) at = seq; draw(); },
    move,
    stop() { clearTimeout(timer); document.removeEventListener('keydown', keys); },
  };
}
