/**
 * The JSON text a store wrote for a stored event, by the StoredEvent object it returned (set by
 * LevelStore.appendEvents). A stream that sends the event sends that text instead of serialising
 * the object again: each event is serialised once, and what a live reader gets is byte for byte
 * what a replay from the store gives.
 */
export const storedEventText = new WeakMap<object, string>();
