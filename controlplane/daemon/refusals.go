package daemon

import (
	"errors"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// refusal is what the caller is told when the state machine refused a command. Its
// code follows from the state's error alone, so the same refusal carries the same code
// whichever operation met it (an unknown node is not_found for a label as for a
// revocation), and meshctl's exit code with it.
func refusal(err error) *api.Error {
	return &api.Error{Code: refusalCode(err), Message: err.Error()}
}

// refusalCode maps each of the state machine's errors to the protocol's code.
func refusalCode(err error) string {
	switch {
	case errors.Is(err, state.ErrUnknownNode), errors.Is(err, state.ErrNoToken), errors.Is(err, state.ErrNoSuchToken), errors.Is(err, state.ErrNoTargets):
		return api.CodeNotFound
	case errors.Is(err, state.ErrNotInitialised):
		return api.CodeUnavailable
	case errors.Is(err, state.ErrBadCommand):
		return api.CodeBadRequest
	case errors.Is(err, state.ErrTokenUnknown):
		return api.CodeTokenUnknown
	case errors.Is(err, state.ErrTokenUsed):
		return api.CodeTokenUsed
	case errors.Is(err, state.ErrTokenExpired), errors.Is(err, state.ErrTokenExpiredAdmitted):
		return api.CodeTokenExpired
	case errors.Is(err, state.ErrTokenOtherNode):
		return api.CodeTokenOtherNode
	case errors.Is(err, state.ErrTokenWrongRole):
		return api.CodeTokenWrongRole
	case errors.Is(err, state.ErrTokenCancelled):
		return api.CodeTokenCancelled
	case errors.Is(err, state.ErrNodeExists):
		return api.CodeNodeExists
	case errors.Is(err, state.ErrKeyRevoked):
		return api.CodeKeyRevoked
	case errors.Is(err, state.ErrKeyInUse):
		return api.CodeKeyInUse
	case errors.Is(err, state.ErrOutOfVersions):
		return api.CodeOutOfVersions
	case errors.Is(err, state.ErrTokenPending):
		return api.CodeTokenPending
	case errors.Is(err, state.ErrNodeRevoked):
		return api.CodeNodeRevoked
	case errors.Is(err, state.ErrKeyMismatch):
		return api.CodeKeyMismatch
	case errors.Is(err, state.ErrTooManyLabels), errors.Is(err, state.ErrRotationMissesNode), errors.Is(err, state.ErrTooManyOperators):
		return api.CodeBadRequest
	case errors.Is(err, state.ErrUnknownOperator), errors.Is(err, state.ErrOperatorKeyNotNamed), errors.Is(err, state.ErrNothingToRenew):
		return api.CodeNotFound
	case errors.Is(err, state.ErrOperatorExists), errors.Is(err, state.ErrOperatorRenewals):
		return api.CodeOperatorExists
	}
	return api.CodeInternal
}
