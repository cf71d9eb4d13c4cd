// The playground's conversations: Pippin sessions (one model, several conversations,
// each switched to without running its history again while the prefix cache holds
// it), kept in IndexedDB after each reply with `session.save()` (transcript + KV
// state), so they come back after a reload and continue where they stopped.

const DB = "pippin-playground";
const STORE = "conversations";

function db() {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(DB, 1);
    open.onupgradeneeded = () => open.result.createObjectStore(STORE, { keyPath: "id" });
    open.onsuccess = () => resolve(open.result);
    open.onerror = () => reject(open.error);
  });
}

async function tx(mode, f) {
  const d = await db();
  try {
    return await new Promise((resolve, reject) => {
      const t = d.transaction(STORE, mode);
      const r = f(t.objectStore(STORE));
      t.oncomplete = () => resolve(r?.result);
      t.onerror = () => reject(t.error);
      t.onabort = () => reject(t.error);
    });
  } finally {
    d.close();
  }
}

/** The saved conversations of `model` (its URL or file name), newest first. */
export async function savedFor(model) {
  const all = (await tx("readonly", (s) => s.getAll())) ?? [];
  return all.filter((c) => c.model === model).sort((a, b) => b.updated - a.updated);
}

export function store(record) {
  return tx("readwrite", (s) => s.put(record));
}

export function forget(id) {
  return tx("readwrite", (s) => s.delete(id));
}

let counter = 0;

/** A conversation: its session (null until a saved one is restored) and its title. */
export function conversation(model, session, title = "New chat") {
  return { id: `${Date.now().toString(36)}-${(counter++).toString(36)}`, model, session, title, bytes: null };
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
  c.bytes = await c.session.save();
  await store({ id: c.id, model: c.model, title: c.title, bytes: c.bytes, updated: Date.now() });
}
