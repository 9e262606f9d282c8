// The console's one script: show the playground fields of the chosen mode, and copy exact request bodies.
"use strict";

function showModeFields() {
  const mode = document.getElementById("mode");
  if (!mode) return;
  const retrieve = mode.value === "retrieve";
  document.querySelectorAll(".ml-only").forEach((el) => el.classList.toggle("hidden", retrieve));
  document.querySelectorAll(".gm-only").forEach((el) => el.classList.toggle("hidden", !retrieve));
}

document.addEventListener("DOMContentLoaded", () => {
  const mode = document.getElementById("mode");
  if (mode) {
    mode.addEventListener("change", showModeFields);
    showModeFields();
  }
  document.querySelectorAll("button.copy").forEach((button) => {
    button.addEventListener("click", () => {
      const source = document.getElementById(button.dataset.copy);
      if (source && navigator.clipboard) {
        navigator.clipboard.writeText(source.textContent).then(() => { button.textContent = "Copied"; });
      }
    });
  });
});
