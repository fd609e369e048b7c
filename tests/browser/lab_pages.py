"""Drive a notebook in JupyterLab in the browser tests (the course book: ``site_pages``).

    open_notebook(page, server, "notebooks/00_measure_your_machine.ipynb")
    state = run_all_cells(page, server, "notebooks/00_measure_your_machine.ipynb")
    moved = move_first_control(page)      # first slider (else dropdown) of the first widget

JupyterLab is driven the way a reader drives it (the Run menu, arrow keys on a focused
slider handle, a dropdown choice); the notebook model (``window.jupyterapp``, exposed by
the test server) is only read, to list error outputs exactly as the cells hold them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from browser_harness import LabServer, wait_until

NOTEBOOK_OPEN_TIMEOUT_S = 90.0
# A hang guard, not the QUICK budget (90 s on an idle 2-core machine, CONTRIBUTING.md; checked
# by benchmarks/notebooks_quick.py): a notebook's time scales with the load of other jobs.
RUN_ALL_TIMEOUT_S = 360.0
WIDGET_UPDATE_TIMEOUT_S = 60.0
SLIDER = ".jp-Notebook .widget-slider [role=slider]"
DROPDOWN = ".jp-Notebook .widget-dropdown select"

# Per non-empty code cell of the open notebook: queued/running ("[*]"), never run, error outputs
# (from the notebook model, as the cells show them) and widgets that failed to render.
NOTEBOOK_STATE_JS = """(path) => {
  const app = window.jupyterapp;
  if (!app) return null;
  const panel = [...app.shell.widgets('main')].find(w => w.context && w.context.path === path);
  if (!panel || !panel.content || !panel.content.widgets) return null;
  const state = {code: 0, pending: 0, unrun: 0, errors: []};
  panel.content.widgets.forEach((cell, i) => {
    // JupyterLab never executes an empty code cell: it keeps no execution count
    if (cell.model.type !== 'code' || !cell.model.sharedModel.getSource().trim()) return;
    state.code += 1;
    const prompt = cell.node.querySelector('.jp-InputPrompt');
    if (prompt && prompt.textContent.includes('*')) state.pending += 1;
    else if (cell.model.executionCount === null) state.unrun += 1;
    for (const o of cell.model.outputs.toJSON())
      if (o.output_type === 'error') state.errors.push(`cell ${i + 1}: ${o.ename}: ${o.evalue}`);
    for (const o of cell.node.querySelectorAll('.jp-OutputArea-output'))
      if (/Error displaying widget|Failed to load model class/.test(o.textContent))
        state.errors.push(`cell ${i + 1}: ${o.textContent.trim().slice(0, 200)}`);
  });
  return state;
}"""

# From a control, find the widget's Output area (the nearest enclosing element in the same
# cell that holds one), tag it and the cell for later locators, return the control's label.
TAG_WIDGET_JS = """(control) => {
  const cell = control.closest('.jp-Cell');
  let box = control.parentElement;
  while (box && box !== cell && !box.querySelector('.widget-output')) box = box.parentElement;
  if (!cell || !box || box === cell) return null;
  cell.setAttribute('data-browser-test', 'widget-cell');
  box.querySelector('.widget-output').setAttribute('data-browser-test', 'widget-output');
  const widget = control.closest('.widget-slider, .widget-dropdown');
  const label = widget && widget.querySelector('.widget-label');
  return label ? label.textContent.trim() : '';
}"""

# What the widget's output shows: its text and every image (src and decoded width).
OUTPUT_SNAPSHOT_JS = """(out) => ({
  text: out.innerText.trim(),
  images: [...out.querySelectorAll('img')].map(i => ({src: i.src, width: i.naturalWidth})),
})"""


def dialog_text(page: Any) -> str:
    """Text of any JupyterLab dialog on screen (kernel choice, errors), for failure messages."""
    with contextlib.suppress(Exception):
        texts = page.locator(".jp-Dialog").all_inner_texts()
        if texts:
            return "dialog on screen: " + " | ".join(t.replace("\n", " ") for t in texts)
    return "no dialog on screen"


def notebook_state(page: Any, rel_path: str) -> dict | None:
    """``NOTEBOOK_STATE_JS`` for the notebook open at ``rel_path`` (None until it is open)."""
    return page.evaluate(NOTEBOOK_STATE_JS, rel_path)


def open_notebook(page: Any, server: LabServer, rel_path: str) -> None:
    """Open ``rel_path`` in JupyterLab and wait until its kernel is connected and idle.

    Raises:
        TimeoutError: the kernel did not become idle (names any dialog on screen).
    """
    page.goto(server.lab_url(rel_path), wait_until="domcontentloaded")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(timeout=NOTEBOOK_OPEN_TIMEOUT_S * 1000)

    def kernel_ready() -> bool:
        kernel = server.kernel_of(rel_path)
        return bool(kernel and kernel["execution_state"] == "idle" and kernel["connections"] > 0
                    and notebook_state(page, rel_path))

    wait_until(kernel_ready, NOTEBOOK_OPEN_TIMEOUT_S, f"the kernel of {rel_path} to be idle",
               detail=lambda: f"{dialog_text(page)}\nserver log:\n{server.log_tail(15)}")


def run_all_cells(page: Any, server: LabServer, rel_path: str) -> dict:
    """Run > Run All Cells, and wait until no cell is queued and the kernel is idle.

    Relies on the committed notebook having unexecuted code cells (outputs are stripped
    except ``# NBVAL_CHECK_OUTPUT`` cells): the run is over when every code cell has an
    execution count, or when an error stopped the queue.

    Returns:
        the final ``NOTEBOOK_STATE_JS`` state (``errors`` lists the cells' error outputs).

    Raises:
        TimeoutError: the run did not finish within ``RUN_ALL_TIMEOUT_S``.
    """
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    def finished() -> dict | None:
        state = notebook_state(page, rel_path)
        kernel = server.kernel_of(rel_path)
        if (state and state["pending"] == 0 and (state["unrun"] == 0 or state["errors"])
                and kernel and kernel["execution_state"] == "idle"):
            return state
        return None

    return wait_until(finished, RUN_ALL_TIMEOUT_S, f"all cells of {rel_path} to run",
                      interval_s=0.5, detail=lambda: f"state: {notebook_state(page, rel_path)}; "
                      f"{dialog_text(page)}")


def output_snapshot(page: Any) -> dict:
    """Text and images currently shown by the tagged widget output."""
    return page.locator("[data-browser-test=widget-output]").evaluate(OUTPUT_SNAPSHOT_JS)


def shows_something(snap: dict) -> bool:
    """The output shows text or images, and every image has decoded (width > 0)."""
    return bool(snap["text"] or snap["images"]) and all(i["width"] > 0 for i in snap["images"])


@dataclass
class Moved:
    """One control moved: which, its values, and the widget output before and after."""

    kind: str  # "slider" or "dropdown"
    label: str
    value_before: str
    value_after: str
    before: dict  # output_snapshot
    after: dict


def _change_value(page: Any, kind: str, control: Any) -> tuple[str, str]:
    """Move a slider one step with an arrow key, or pick a dropdown's next option."""
    if kind == "slider":
        value = control.get_attribute("aria-valuenow")
        at_max = float(value) >= float(control.get_attribute("aria-valuemax"))
        control.focus()
        control.press("ArrowLeft" if at_max else "ArrowRight")  # the reader's keyboard path
        read = lambda: control.get_attribute("aria-valuenow")
    else:
        value = control.input_value()
        options = control.locator("option").evaluate_all("os => os.map(o => o.value)")
        assert len(options) > 1, f"the dropdown has one option only: {options}"
        i = options.index(value)
        control.select_option(index=i - 1 if i + 1 == len(options) else i + 1)
        read = control.input_value
    wait_until(lambda: read() != value, 10, f"the {kind} to take a new value")
    return value, read()


def move_first_control(page: Any, shots: tuple[Path, Path] | None = None) -> Moved:
    """Change the notebook's first widget slider (or, with no slider, its first dropdown)
    and wait until the widget's output shows something new.

    A slider moves one step right (left at its maximum); a dropdown takes its next option.
    ``shots``: where to save screenshots of the widget's cell before and after.

    Raises:
        AssertionError: no control, no Output area beside it, or no change after the move.
        TimeoutError: the output did not change within ``WIDGET_UPDATE_TIMEOUT_S``.
    """
    try:
        page.locator(f"{SLIDER}, {DROPDOWN}").first.wait_for(state="visible", timeout=30_000)
    except Exception as e:
        raise AssertionError("no widget slider or dropdown rendered in the notebook (is the "
                             f"widget manager working? console errors: {page.console_errors[-5:]})"
                             ) from e
    kind = "slider" if page.locator(SLIDER).count() else "dropdown"
    control = page.locator(SLIDER if kind == "slider" else DROPDOWN).first
    label = control.evaluate(TAG_WIDGET_JS)
    assert label is not None, f"the first {kind} has no Output area beside it in its cell"

    def shown() -> dict | None:
        snap = output_snapshot(page)
        return snap if shows_something(snap) else None

    before = wait_until(shown, WIDGET_UPDATE_TIMEOUT_S, "the widget's first output")
    cell = page.locator("[data-browser-test=widget-cell]")
    if shots:
        cell.screenshot(path=str(shots[0]))
    value_before, value_after = _change_value(page, kind, control)

    def changed() -> dict | None:
        snap = output_snapshot(page)
        return snap if shows_something(snap) and snap != before else None

    after = wait_until(changed, WIDGET_UPDATE_TIMEOUT_S,
                       f"the widget's output to change after {kind} {label!r} moved "
                       f"from {value_before} to {value_after}",
                       detail=lambda: f"output text: {output_snapshot(page)['text'][:300]!r}")
    if shots:
        cell.screenshot(path=str(shots[1]))
    return Moved(kind, label, value_before, value_after, before, after)
