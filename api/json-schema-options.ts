/**
 * How the API's documents turn zod schemas into JSON Schema: the input side (what a client sends; defaults are
 * optional), without the ±2^53 bounds zod gives every integer (they say nothing a reader needs).
 */
import type { z } from 'zod';

export const JSON_SCHEMA_OPTIONS = {
  io: 'input',
  override: ({ jsonSchema }) => {
    if (jsonSchema.minimum === Number.MIN_SAFE_INTEGER) delete jsonSchema.minimum;
    if (jsonSchema.maximum === Number.MAX_SAFE_INTEGER) delete jsonSchema.maximum;
  },
} satisfies Parameters<typeof z.toJSONSchema>[1];
