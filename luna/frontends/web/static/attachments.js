// Files for the next message: the attach button, a paste into the message box, a drop on the
// composer. They show as chips until the message is sent (multipart, with its text); the
// server says which it took and why it refused the others.

import { $, clear, el } from "./dom.js";

let pending = []; // File objects, in the order picked

function sizeText(n) {
  if (n < 1024) return `${n} bytes`;
  if (n < 1024 * 1024) return `${Math.round(n / 1024)} KB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MB`;
}

function render() {
  const box = clear($("#attachments"));
  box.hidden = pending.length === 0;
  pending.forEach((file, i) => {
    const remove = el("button", { type: "button", class: "link", title: "remove" }, "×");
    remove.addEventListener("click", () => {
      pending.splice(i, 1);
      render();
    });
    box.append(el("span", { class: "chip" }, `${file.name} (${sizeText(file.size)}) `, remove));
  });
}

function add(files) {
  for (const file of files) {
    // A pasted screenshot is often called "image.png": number it so chips tell them apart.
    const name = file.name && file.name !== "image.png" ? file.name : `pasted-${pending.length + 1}.png`;
    pending.push(file.name === name ? file : new File([file], name, { type: file.type }));
  }
  render();
}

export function pendingFiles() {
  return pending.slice();
}

export function clearFiles() {
  pending = [];
  render();
}

export function initAttachments() {
  const picker = $("#attach-input");
  $("#attach").addEventListener("click", () => picker.click());
  picker.addEventListener("change", () => {
    add(picker.files);
    picker.value = "";
  });
  $("#input").addEventListener("paste", (event) => {
    const files = event.clipboardData?.files;
    if (files && files.length) {
      event.preventDefault();
      add(files);
    }
  });
  const composer = $("#composer");
  composer.addEventListener("dragover", (event) => {
    event.preventDefault();
    composer.classList.add("dropping");
  });
  composer.addEventListener("dragleave", () => composer.classList.remove("dropping"));
  composer.addEventListener("drop", (event) => {
    event.preventDefault();
    composer.classList.remove("dropping");
    if (event.dataTransfer?.files?.length) add(event.dataTransfer.files);
  });
  render();
}
