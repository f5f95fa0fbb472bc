import { defineArea } from '../../core/area.ts';
export default defineArea({ name: 'dns', mount() {} });
