// The playground's conversations: Pippin sessions (one model, several conversations,
// each switched to without running its history again while the prefix cache holds
// it), kept in IndexedDB after each reply with `session.save()` (transcript + KV
// state), so they come back after a reload and continue where they stopped. The list
// (titles) and the saved bytes are kept apart: listing reads no KV state.

const DB = "pippin-playground";
const LIST = "conversations";
const BYTES = "saved";

function db() {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(DB, 2);
    open.onupgradeneeded = () => {
      const d = open.result;
      for (const name of [LIST, BYTES]) if (d.objectStoreNames.contains(name)) d.deleteObjectStore(name);
      d.createObjectStore(LIST, { keyPath: "id" }).createIndex("model", "model");
      d.createObjectStore(BYTES);
    };
    open.onsuccess = () => resolve(open.result);
    open.onerror = () => reject(open.error);
  });
}

/** `f(stores)` in one transaction over both stores; its request's result. */
async function tx(mode, f) {
  const d = await db();
  try {
    return await new Promise((resolve, reject) => {
      const t = d.transaction([LIST, BYTES], mode);
      const r = f(t.objectStore(LIST), t.objectStore(BYTES));
      t.oncomplete = () => resolve(r?.result);
      t.onerror = () => reject(t.error);
      t.onabort = () => reject(t.error);
    });
  } finally {
    d.close();
  }
}

/** The saved conversations of `model` (its URL or file name), newest first: titles only. */
export async function savedFor(model) {
  const list = (await tx("readonly", (l) => l.index("model").getAll(model))) ?? [];
  return list.sort((a, b) => b.updated - a.updated);
}

/** The saved bytes of conversation `id` (undefined when there are none). */
export function bytesOf(id) {
  return tx("readonly", (_, b) => b.get(id));
}

export function forget(id) {
  return tx("readwrite", (l, b) => {
    b.delete(id);
    return l.delete(id);
  });
}

let counter = 0;

/** A conversation: its session (null until a saved one is restored) and its title. */
export function conversation(model, session, title = "New chat") {
  return { id: `${Date.now().toString(36)}-${(counter++).toString(36)}`, model, session, title };
}

/** The first user message, shortened: a conversation's title. */
export function titleOf(messages) {
  const first = messages.find((m) => m.role === "user")?.content ?? "";
  const text = typeof first === "string" ? first : "";
  return text ? (text.length > 32 ? `${text.slice(0, 31)}…` : text) : "New chat";
}

/** Saves `c` (after a reply): the session's bytes, its title, when. */
export async function save(c) {
  if (c.title === "New chat") c.title = titleOf(c.session.messages);
  const bytes = await c.session.save();
  await tx("readwrite", (l, b) => {
    b.put(bytes, c.id);
    return l.put({ id: c.id, model: c.model, title: c.title, updated: Date.now() });
  });
}
