/**
 * What an aborted wait() or progress() rejects with: an `AbortError` (a DOMException, as fetch and Node's own APIs
 * give), its `cause` the signal's reason. A `WaitTimeoutError` means the wait's own timeoutMs passed, nothing else.
 */
export function abortError(signal: AbortSignal, what: string): DOMException {
  return new DOMException(`${what} was aborted`, { name: 'AbortError', cause: signal.reason });
}

export function isAbortError(err: unknown): err is DOMException {
  return err instanceof Error && err.name === 'AbortError';
}
