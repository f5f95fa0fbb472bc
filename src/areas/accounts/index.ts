/**
 * @module accounts — accounts and API tokens (spec 001 "Authentication"; paths from the official
 * document: `/accounts`, `/user/tokens…`).
 * Tokens carry policies of permission groups (declared by every area) over account and zone
 * resources; the secret appears only in the create answer.
 * Aliases: none.
 * LIMITATIONS: one local user; accounts are created by the first start (OUTPOST_ACCOUNT_ID) and
 * cannot be created through the API; account-owned tokens (`/accounts/{id}/tokens`) are not served.
 */
import { defineArea } from '../../core/area.ts';
import { mountAccountRoutes } from './routes.ts';

export default defineArea({
  name: 'accounts',
  mount(ctx) {
    ctx.permissions.define({ key: 'account_settings', name: 'Account Settings', scope: 'account' });
    ctx.permissions.define({ key: 'api_tokens', name: 'API Tokens', scope: 'user' });
    mountAccountRoutes(ctx);
  },
});
